#include "ftcc/nn/activation.hpp"

namespace ftcc::nn {

Tensor ElementwiseActivation::forward(const Tensor& x) {
  switch (kind_) {
    case tensor::Activation::relu: return tensor::relu(x);
    case tensor::Activation::tanh: return tensor::tanh(x);
    case tensor::Activation::sigmoid: return tensor::sigmoid(x);
    case tensor::Activation::identity: break;
  }
  return x;
}

}  // namespace ftcc::nn
