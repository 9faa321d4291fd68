// tensor/cuda/kernels.hpp: host entry points of ftcc's own CUDA kernels (device pointers in,
// launches on the default stream, asynchronous). Mirrors tensor/kernels_cpu.hpp so that every
// kernel has its CPU reference next to it; the test tests/engine/cuda_kernels_test.cpp compares
// the two. Every launch is checked with file:line (tensor/cuda/check.cuh) and throws ftcc::Error.
//
// Defined in libftcc_cuda.so (builds with CUDA only); libftcc reaches them through the table of
// tensor/cuda/backend.hpp, a program that calls them directly links libftcc_cuda.
#pragma once

#include <cstdint>

namespace ftcc::tensor::cuda {

using i64 = std::int64_t;

// Tiled shared-memory GEMM: C[m,n] (= or +=) op(A) op(B) (+ bias[n] per row). gemm.cu.
template <class T>
void gemm(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, const T* b, T* c, const T* bias, bool accumulate);
// cuBLAS SGEMM/DGEMM with the same contract: the reference for tests and benchmarks. gemm.cu.
template <class T>
void gemm_cublas(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, const T* b, T* c, bool accumulate);

// Elementwise and reductions. elementwise.cu / reduce.cu.
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
void fill(i64 n, T value, T* out);
template <class T>
void fill_from_scalar(i64 n, const T* s, T scale, T* out);
template <class T>
void unary_forward(int op, i64 n, const T* x, T* y);
template <class T>
void unary_backward(int op, i64 n, const T* y, const T* gy, T* gx);
template <class T>
void sum_all(i64 n, const T* x, T* out);

// MSE loss: out[0] = mean((p-t)^2) by a two-level tree reduction; backward gp = 2(p-t)/n g[0].
template <class T>
void mse_forward(i64 n, const T* p, const T* t, T* out);
template <class T>
void mse_backward(i64 n, const T* p, const T* t, const T* g, T* gp);

// Cross-entropy of row-major [rows, cols] logits x against probability targets t, one warp per
// row (the formulas and the [rows, 2] lse of cpu::cross_entropy_forward), out[0] = scale * sum of
// the row losses (summed as sum_all does, in an order that depends only on rows). Backward:
// gx_ij = scale g[0] (exp((x_ij - m_i) - log s_i) sum_j t_ij - t_ij). rows, cols >= 1.
template <class T>
void cross_entropy_forward(i64 rows, i64 cols, const T* x, const T* t, T scale, T* lse, T* out);
template <class T>
void cross_entropy_backward(i64 rows, i64 cols, const T* x, const T* t, const T* lse, const T* g, T scale, T* gx);

// Fused optimizer updates (one pass over parameter, gradient and state). optim.cu.
void sgd_step(i64 n, float* param, const float* grad, float* momentum_buf, float lr, float momentum,
              float dampening, float weight_decay, bool nesterov, bool first_step);
void adam_step(i64 n, float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
               float eps, float weight_decay, bool decoupled, float bias_correction1, float bias_correction2,
               float one_minus_beta1, float one_minus_beta2);

}  // namespace ftcc::tensor::cuda
