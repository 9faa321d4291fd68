// tensor/kernels_cpu.hpp: CPU implementations of tensor/kernels.hpp over raw pointers, through
// Eigen maps of our own storage (no copies). Templated on float and double.
#pragma once

#include <cstdint>

namespace ftcc::tensor::cpu {

using i64 = std::int64_t;

template <class T>
void gemm(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, const T* b, T* c, const T* bias, bool accumulate);
template <class T>
void binary(int op, i64 n, const T* a, const T* b, T* out);
template <class T>
void add_rowvec(i64 rows, i64 cols, const T* a, const T* v, T* out);
template <class T>
void colsum(i64 rows, i64 cols, const T* x, T* out, bool accumulate);
template <class T>
void axpy(i64 n, T alpha, const T* x, T* y);
template <class T>
void scale_copy(i64 n, T alpha, const T* x, T* out);
template <class T>
void unary_forward(int op, i64 n, const T* x, T* y);
// y = f(y + bias per row), in place; bias may be null; op < 0: no activation.
template <class T>
void bias_unary(int op, i64 rows, i64 cols, T* y, const T* bias);
template <class T>
void unary_backward(int op, i64 n, const T* y, const T* gy, T* gx);
template <class T>
T sum_all(i64 n, const T* x);
template <class T>
T mse_forward(i64 n, const T* p, const T* t);
template <class T>
void mse_backward(i64 n, const T* p, const T* t, T g, T* gp);
// Cross-entropy of row-major [rows, cols] logits x against probability targets t (one-hot rows
// are the usual case). Per row, with m the row's maximum and s = sum_j exp(x_j - m):
//   lse[2i] = m, lse[2i+1] = log s,   loss_i = sum_j t_j (m + log s - x_j) = sum_j t_j (m - x_j) + log s sum_j t_j
// (no exp of a large logit, no log of a small probability; m and log s kept apart so that
// x_j - m stays exact in backward when the logits are large). Returns sum_i loss_i.
template <class T>
T cross_entropy_forward(i64 rows, i64 cols, const T* x, const T* t, T* lse);
// gx_ij = g (exp((x_ij - m) - log s) sum_j t_ij - t_ij): the gradient of g * sum_i loss_i.
template <class T>
void cross_entropy_backward(i64 rows, i64 cols, const T* x, const T* t, const T* lse, T g, T* gx);

}  // namespace ftcc::tensor::cpu
