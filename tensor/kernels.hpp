// tensor/kernels.hpp: the device-dispatching primitives that ops and optimizers are made of.
//
// Each function takes tensors that already have the right shapes, checks dtype/device agreement
// and runs the CPU (Eigen, kernels_cpu.cpp) or CUDA (tensor/cuda/) implementation. No autograd
// here: tensor/ops.hpp records the graph and calls these for forward and backward. Scalars that
// live on the device (a loss, its gradient) are passed as one-element tensors so that a CUDA
// training step never synchronises with the host.
#pragma once

#include "ftcc/tensor/tensor.hpp"

namespace ftcc::tensor::kern {

// C[M,N] (= or +=) op(A) * op(B) (+ bias[N] on every row), op = transpose when the flag is set.
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, const Tensor* bias,
          bool accumulate);

enum class Binary { Add, Sub, Mul };
void binary(Binary op, const Tensor& a, const Tensor& b, const Tensor& out);  // same numel
void add_rowvec(const Tensor& a, const Tensor& v, const Tensor& out);        // out = a + v per row
void colsum(const Tensor& x, const Tensor& out, bool accumulate);            // out[j] (+)= sum_i x[i,j]
void axpy(double alpha, const Tensor& x, const Tensor& y);                    // y += alpha * x
void scale_copy(double alpha, const Tensor& x, const Tensor& out);           // out = alpha * x

enum class Unary { Relu, Tanh, Sigmoid };
void unary_forward(Unary op, const Tensor& x, const Tensor& y);
// gx = gy * f'(x), with f' expressed through the saved output y (relu: y > 0, tanh: 1 - y^2,
// sigmoid: y (1 - y)); the kink of relu at 0 gets derivative 0.
void unary_backward(Unary op, const Tensor& y, const Tensor& gy, const Tensor& gx);
// y[M,N] = f(y + bias[N] on every row), in place: the epilogue of a fused linear. bias may be
// null, op may be null (bias only). Bitwise the same as add_rowvec followed by unary_forward.
void bias_unary(const Tensor& y, const Tensor* bias, const Unary* op);

void sum_all(const Tensor& x, const Tensor& out);  // out[0] = sum of x (pairwise/tree order)
// out[i] = scale * s[0] for every i, with s a one-element tensor on out's device.
void fill_from_scalar(const Tensor& s, double scale, const Tensor& out);
void fill(const Tensor& out, double value);

// Mean squared error: out[0] = mean((p - t)^2); backward gp = 2 (p - t) / n * g[0].
void mse_forward(const Tensor& pred, const Tensor& target, const Tensor& out);
void mse_backward(const Tensor& pred, const Tensor& target, const Tensor& grad_out, const Tensor& grad_pred);

// Cross-entropy of [N, C] logits against [N, C] probability targets: out[0] = scale * sum over
// rows of -sum_j t_ij log_softmax(x)_ij, and lse[N, 2] = each row's maximum and log of the sum of
// the shifted exponentials (the log-sum-exp in two parts), kept for backward:
// grad_logits = scale g[0] (softmax(x) sum_j t_ij - t).
void cross_entropy_forward(const Tensor& logits, const Tensor& target, double scale, const Tensor& lse,
                           const Tensor& out);
void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& grad_out,
                            double scale, const Tensor& grad_logits);

}  // namespace ftcc::tensor::kern
