// tensor/ops.hpp: differentiable operations. Each records a node when an input requires grad and
// grad mode is on (tensor/autograd.hpp), and runs on the inputs' device (CPU or CUDA) and dtype.
//
// Shapes:  matmul   [m,k] x [k,n] -> [m,n]
//          linear   x [batch,in], weight [out,in] (PyTorch layout), bias [out] -> [batch,out]
//          add/sub/mul  same shapes; add also takes b of shape [n] against a of shape [..., n]
//                       (bias broadcast over rows)
//          sum, mean, mse_loss -> one-element tensor of shape [1]
//          relu, tanh, sigmoid: elementwise, any shape
// Classification is done without softmax: MSE against one-hot targets (data/one_hot).
#pragma once

#include "tensor/tensor.hpp"

namespace ftcc::tensor {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// Fused matmul + bias (one GEMM with the bias added in its epilogue); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// mean((pred - target)^2) over all elements; target never receives a gradient.
Tensor mse_loss(const Tensor& pred, const Tensor& target);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }

}  // namespace ftcc::tensor
