#include "ftcc/nn/activation.hpp"

#include "ftcc/tensor/ops.hpp"

namespace ftcc::nn {

Tensor ReLU::forward(const Tensor& x) { return tensor::relu(x); }
Tensor Tanh::forward(const Tensor& x) { return tensor::tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return tensor::sigmoid(x); }

}  // namespace ftcc::nn
