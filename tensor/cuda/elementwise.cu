// tensor/cuda/elementwise.cu: elementwise kernels (binary ops, bias broadcast, axpy, fills,
// activations forward and backward). All use grid-stride loops so any n works with a capped grid;
// reads and writes are coalesced (thread i touches element i).
#include <cuda_runtime.h>

#include "ftcc/tensor/cuda/check.cuh"
#include "ftcc/tensor/cuda/kernels.hpp"

namespace ftcc::tensor::cuda {

namespace {

constexpr int kBlock = 256;

#define FTCC_GRID_STRIDE(i, n) \
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<i64>(gridDim.x) * blockDim.x)

template <class T>
__global__ void binary_k(int op, i64 n, const T* a, const T* b, T* out) {
  FTCC_GRID_STRIDE(i, n) { out[i] = op == 0 ? a[i] + b[i] : op == 1 ? a[i] - b[i] : a[i] * b[i]; }
}

template <class T>
__global__ void add_rowvec_k(i64 rows, i64 cols, const T* a, const T* v, T* out) {
  FTCC_GRID_STRIDE(i, rows * cols) { out[i] = a[i] + v[i % cols]; }
}

template <class T>
__global__ void axpy_k(i64 n, T alpha, const T* x, T* y) {
  FTCC_GRID_STRIDE(i, n) { y[i] += alpha * x[i]; }
}

template <class T>
__global__ void scale_copy_k(i64 n, T alpha, const T* x, T* out) {
  FTCC_GRID_STRIDE(i, n) { out[i] = alpha * x[i]; }
}

template <class T>
__global__ void fill_k(i64 n, T value, T* out) {
  FTCC_GRID_STRIDE(i, n) { out[i] = value; }
}

template <class T>
__global__ void fill_from_scalar_k(i64 n, const T* s, T scale, T* out) {
  T v = scale * s[0];
  FTCC_GRID_STRIDE(i, n) { out[i] = v; }
}

template <class T>
__device__ T sigmoid_of(T x) {
  return T(1) / (T(1) + exp(-x));
}

template <class T>
__global__ void unary_fwd_k(int op, i64 n, const T* x, T* y) {
  FTCC_GRID_STRIDE(i, n) {
    T v = x[i];
    y[i] = op == 0 ? (v > T(0) ? v : T(0)) : op == 1 ? tanh(v) : sigmoid_of(v);
  }
}

template <class T>
__global__ void unary_bwd_k(int op, i64 n, const T* y, const T* gy, T* gx) {
  FTCC_GRID_STRIDE(i, n) {
    T v = y[i];
    T d = op == 0 ? (v > T(0) ? T(1) : T(0)) : op == 1 ? T(1) - v * v : v * (T(1) - v);
    gx[i] = gy[i] * d;
  }
}

}  // namespace

#define FTCC_LAUNCH(kernel, n, ...)                                                 \
  do {                                                                              \
    if ((n) > 0) {                                                                  \
      kernel<<<detail::grid_for((n), kBlock), kBlock>>>(__VA_ARGS__);               \
      FTCC_CUDA_CHECK_LAUNCH();                                                     \
    }                                                                               \
  } while (0)

template <class T>
void binary(int op, i64 n, const T* a, const T* b, T* out) {
  FTCC_LAUNCH(binary_k<T>, n, op, n, a, b, out);
}
template <class T>
void add_rowvec(i64 rows, i64 cols, const T* a, const T* v, T* out) {
  FTCC_LAUNCH(add_rowvec_k<T>, rows * cols, rows, cols, a, v, out);
}
template <class T>
void axpy(i64 n, T alpha, const T* x, T* y) {
  FTCC_LAUNCH(axpy_k<T>, n, n, alpha, x, y);
}
template <class T>
void scale_copy(i64 n, T alpha, const T* x, T* out) {
  FTCC_LAUNCH(scale_copy_k<T>, n, n, alpha, x, out);
}
template <class T>
void fill(i64 n, T value, T* out) {
  FTCC_LAUNCH(fill_k<T>, n, n, value, out);
}
template <class T>
void fill_from_scalar(i64 n, const T* s, T scale, T* out) {
  FTCC_LAUNCH(fill_from_scalar_k<T>, n, n, s, scale, out);
}
template <class T>
void unary_forward(int op, i64 n, const T* x, T* y) {
  FTCC_LAUNCH(unary_fwd_k<T>, n, op, n, x, y);
}
template <class T>
void unary_backward(int op, i64 n, const T* y, const T* gy, T* gx) {
  FTCC_LAUNCH(unary_bwd_k<T>, n, op, n, y, gy, gx);
}

#define FTCC_INSTANTIATE(T)                                            \
  template void binary<T>(int, i64, const T*, const T*, T*);           \
  template void add_rowvec<T>(i64, i64, const T*, const T*, T*);       \
  template void axpy<T>(i64, T, const T*, T*);                         \
  template void scale_copy<T>(i64, T, const T*, T*);                   \
  template void fill<T>(i64, T, T*);                                   \
  template void fill_from_scalar<T>(i64, const T*, T, T*);             \
  template void unary_forward<T>(int, i64, const T*, T*);              \
  template void unary_backward<T>(int, i64, const T*, const T*, T*);
FTCC_INSTANTIATE(float)
FTCC_INSTANTIATE(double)

}  // namespace ftcc::tensor::cuda
