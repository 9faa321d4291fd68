// tensor/ops.hpp: differentiable operations. Each records a node when an input requires grad and
// grad mode is on (tensor/autograd.hpp), and runs on the inputs' device (CPU or CUDA) and dtype.
//
// Shapes:  matmul   [m,k] x [k,n] -> [m,n]
//          linear   x [batch,in], weight [out,in] (PyTorch layout), bias [out] -> [batch,out],
//                   optionally followed by an activation in the same op
//          add/sub/mul  same shapes; add also takes b of shape [n] against a of shape [..., n]
//                       (bias broadcast over rows)
//          sum, mean, mse_loss, cross_entropy_loss -> one-element tensor of shape [1]
//          relu, tanh, sigmoid: elementwise, any shape
#pragma once

#include "ftcc/tensor/tensor.hpp"

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
// act(x W^T + b) in one op: after the GEMM, one pass adds the bias and applies the activation in
// place (relu; tanh and sigmoid take a second pass over the same buffer), one output tensor and
// one graph node instead of two. Bitwise the same values and gradients as act(linear(x, W, b)).
enum class Activation { identity, relu, tanh, sigmoid };
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act);
// relu, tanh or sigmoid of x by name; identity returns x itself.
Tensor activation(const Tensor& x, Activation act);
// mean((pred - target)^2) over all elements; target never receives a gradient.
Tensor mse_loss(const Tensor& pred, const Tensor& target);
// sum((pred - target)^2) / denominator. For micro-batches: with denominator = (global batch rows)
// x (outputs), the gradients of the micro-batches of one global batch *add up* to the gradient of
// mse_loss over the whole batch, so a trainer can sum micro-batch gradients (and allreduce-sum
// across ranks) without rescaling.
Tensor mse_loss(const Tensor& pred, const Tensor& target, double denominator);
// Cross-entropy of logits [N, C] against targets [N, C] that are class probabilities (one-hot rows,
// as data::one_hot makes them, or soft labels): mean over the N rows of -sum_j t_ij log_softmax(x)_ij.
// PyTorch's F.cross_entropy(x, t) with probability targets. One fused op: the softmax is never
// materialised in forward, the log-sum-exp is shifted by each row's maximum (finite for any finite
// logits), and backward is softmax(x) sum_j t_ij - t. target never receives a gradient.
// Throws ftcc::InvalidArgument when logits is not 2-D with at least one row and one column, or
// target's shape differs.
Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target);
// The sum of the rows' losses / denominator: with denominator = (global batch rows), micro-batch
// gradients add up to the whole batch's, as for mse_loss.
Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target, double denominator);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }

}  // namespace ftcc::tensor
