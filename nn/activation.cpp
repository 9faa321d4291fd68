#include "ftcc/nn/activation.hpp"

namespace ftcc::nn {

Tensor ElementwiseActivation::forward(const Tensor& x) { return tensor::activation(x, kind_); }

}  // namespace ftcc::nn
