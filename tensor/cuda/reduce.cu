// tensor/cuda/reduce.cu: reductions: sum of all elements, column sums (bias gradient), the MSE
// loss (a reduction of squared differences) and the cross-entropy loss (a warp per row for the
// row's log-sum-exp, then the row losses reduced like a sum), forward and backward.
//
// Full reductions run in two launches: up to kMaxBlocks blocks each reduce a grid-stride share of
// the input in registers, then across the warp with shuffles and across warps through shared
// memory, writing one partial; a single block then reduces the partials. The order of additions
// depends only on n (not on timing), so results are deterministic run to run. Partials live in a
// stream-ordered scratch allocation (cudaMallocAsync), so no host synchronisation is needed.
#include <cuda_runtime.h>

#include "ftcc/tensor/cuda/check.cuh"
#include "ftcc/tensor/cuda/kernels.hpp"

namespace ftcc::tensor::cuda {

namespace {

constexpr int kBlock = 512;
constexpr int kMaxBlocks = 1024;

template <class T>
__device__ T block_sum(T v) {
  __shared__ T warp_sums[kBlock / 32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : T(0);
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;  // valid in thread 0
}

// Stage 1: partial[block] = sum over this block's grid-stride share of f(i).
// Mode 0: x[i]; mode 1: (p[i] - t[i])^2.
template <class T, int Mode>
__global__ void partial_k(i64 n, const T* __restrict__ p, const T* __restrict__ t, T* __restrict__ partial) {
  T acc = T(0);
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    if constexpr (Mode == 0) {
      acc += p[i];
    } else {
      T d = p[i] - t[i];
      acc += d * d;
    }
  }
  T s = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Stage 2: out[0] = scale * sum of the partials (one block).
template <class T>
__global__ void final_k(int count, const T* __restrict__ partial, T scale, T* __restrict__ out) {
  T acc = T(0);
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  T s = block_sum(acc);
  if (threadIdx.x == 0) out[0] = scale * s;
}

template <class T, int Mode>
void reduce(i64 n, const T* p, const T* t, T scale, T* out) {
  int blocks = static_cast<int>(std::min<i64>(kMaxBlocks, std::max<i64>(1, (n + kBlock - 1) / kBlock)));
  T* partial = nullptr;
  FTCC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), sizeof(T) * blocks, 0));
  partial_k<T, Mode><<<blocks, kBlock>>>(n, p, t, partial);
  FTCC_CUDA_CHECK_LAUNCH();
  final_k<T><<<1, kBlock>>>(blocks, partial, scale, out);
  FTCC_CUDA_CHECK_LAUNCH();
  FTCC_CUDA_CHECK(cudaFreeAsync(partial, 0));
}

// Column sums of a row-major [rows, cols] matrix: a 32 x 32 block owns 32 columns; its 32 row
// lanes stride down the rows (coalesced 32-wide reads), then reduce through shared memory.
template <class T>
__global__ void colsum_k(i64 rows, i64 cols, const T* __restrict__ x, T* __restrict__ out, bool accumulate) {
  __shared__ T tile[32][33];  // +1 column: no bank conflicts in the transposed read below
  i64 j = blockIdx.x * 32LL + threadIdx.x;
  T acc = T(0);
  if (j < cols)
    for (i64 i = threadIdx.y; i < rows; i += 32) acc += x[i * cols + j];
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    T s = T(0);
    for (int r = 0; r < 32; ++r) s += tile[r][threadIdx.x];
    out[j] = accumulate ? out[j] + s : s;
  }
}

template <class T>
__global__ void mse_bwd_k(i64 n, const T* __restrict__ p, const T* __restrict__ t, const T* __restrict__ g,
                          T* __restrict__ gp) {
  T scale = T(2) * g[0] / T(n);
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    gp[i] = scale * (p[i] - t[i]);
}

template <class T>
__device__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;  // valid in every lane
}

template <class T>
__device__ T warp_max(T v) {
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Rows are spread over the warps of the grid; every lane of a warp works on the same row, so the
// whole warp takes part in each shuffle.
template <class T>
__global__ void ce_rows_k(i64 rows, i64 cols, const T* __restrict__ x, const T* __restrict__ t, T* __restrict__ lse,
                          T* __restrict__ row_loss) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x / 32) + threadIdx.x / 32; i < rows; i += warps) {
    const T* xr = x + i * cols;
    const T* tr = t + i * cols;
    T m = T(-INFINITY);
    for (i64 j = lane; j < cols; j += 32) m = max(m, xr[j]);
    m = warp_max(m);
    T s = T(0), ts = T(0), tx = T(0);
    for (i64 j = lane; j < cols; j += 32) {
      s += exp(xr[j] - m);
      ts += tr[j];
      tx += tr[j] * (m - xr[j]);
    }
    s = warp_sum(s);
    ts = warp_sum(ts);
    tx = warp_sum(tx);
    if (lane == 0) {
      const T log_s = log(s);
      lse[2 * i] = m;
      lse[2 * i + 1] = log_s;
      row_loss[i] = tx + log_s * ts;
    }
  }
}

template <class T>
__global__ void ce_bwd_k(i64 rows, i64 cols, const T* __restrict__ x, const T* __restrict__ t,
                         const T* __restrict__ lse, const T* __restrict__ g, T scale, T* __restrict__ gx) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  const T k = scale * g[0];
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x / 32) + threadIdx.x / 32; i < rows; i += warps) {
    const T* xr = x + i * cols;
    const T* tr = t + i * cols;
    T ts = T(0);
    for (i64 j = lane; j < cols; j += 32) ts += tr[j];
    ts = warp_sum(ts);
    const T m = lse[2 * i], log_s = lse[2 * i + 1];
    for (i64 j = lane; j < cols; j += 32) gx[i * cols + j] = k * (exp((xr[j] - m) - log_s) * ts - tr[j]);
  }
}

constexpr int kRowBlock = 256;  // 8 warps, 8 rows at a time

unsigned row_grid(i64 rows) { return detail::grid_for(rows, kRowBlock / 32); }

}  // namespace

template <class T>
void sum_all(i64 n, const T* x, T* out) {
  reduce<T, 0>(n, x, nullptr, T(1), out);
}

template <class T>
void colsum(i64 rows, i64 cols, const T* x, T* out, bool accumulate) {
  if (cols == 0) return;
  dim3 block(32, 32);
  colsum_k<T><<<static_cast<unsigned>((cols + 31) / 32), block>>>(rows, cols, x, out, accumulate);
  FTCC_CUDA_CHECK_LAUNCH();
}

template <class T>
void mse_forward(i64 n, const T* p, const T* t, T* out) {
  reduce<T, 1>(n, p, t, T(1) / T(n), out);
}

template <class T>
void mse_backward(i64 n, const T* p, const T* t, const T* g, T* gp) {
  if (n == 0) return;
  mse_bwd_k<T><<<detail::grid_for(n, 256), 256>>>(n, p, t, g, gp);
  FTCC_CUDA_CHECK_LAUNCH();
}

template <class T>
void cross_entropy_forward(i64 rows, i64 cols, const T* x, const T* t, T scale, T* lse, T* out) {
  T* row_loss = nullptr;
  FTCC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&row_loss), sizeof(T) * rows, 0));
  ce_rows_k<T><<<row_grid(rows), kRowBlock>>>(rows, cols, x, t, lse, row_loss);
  FTCC_CUDA_CHECK_LAUNCH();
  reduce<T, 0>(rows, row_loss, nullptr, scale, out);
  FTCC_CUDA_CHECK(cudaFreeAsync(row_loss, 0));
}

template <class T>
void cross_entropy_backward(i64 rows, i64 cols, const T* x, const T* t, const T* lse, const T* g, T scale, T* gx) {
  ce_bwd_k<T><<<row_grid(rows), kRowBlock>>>(rows, cols, x, t, lse, g, scale, gx);
  FTCC_CUDA_CHECK_LAUNCH();
}

#define FTCC_INSTANTIATE(T)                                          \
  template void sum_all<T>(i64, const T*, T*);                       \
  template void colsum<T>(i64, i64, const T*, T*, bool);             \
  template void mse_forward<T>(i64, const T*, const T*, T*);         \
  template void mse_backward<T>(i64, const T*, const T*, const T*, T*); \
  template void cross_entropy_forward<T>(i64, i64, const T*, const T*, T, T*, T*); \
  template void cross_entropy_backward<T>(i64, i64, const T*, const T*, const T*, const T*, T, T*);
FTCC_INSTANTIATE(float)
FTCC_INSTANTIATE(double)

}  // namespace ftcc::tensor::cuda
