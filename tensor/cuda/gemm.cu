// tensor/cuda/gemm.cu: ftcc's own tiled GEMM (used by Linear forward and backward) and the cuBLAS
// reference behind the same contract.
//
// C[m,n] (= or +=) op(A)[m,k] op(B)[k,n] (+ bias[n]), all row-major. One thread block computes a
// BM x BN tile of C; it walks k in steps of BK, staging op(A) and op(B) tiles in shared memory,
// and each of its 256 threads accumulates a TM x TN register tile (register blocking: every
// shared-memory value read is reused TN or TM times). The A tile is stored k-major (As[p][i]) so
// the inner loop reads both tiles along contiguous rows. Global loads follow the memory order of
// the operand (transposed or not), so they are coalesced for every transpose combination. Edge
// tiles load zeros beyond m, n, k, so any shape works (tests use primes).
// Two configurations: 64x64 (TM=TN=4) for small problems (more blocks in flight), 128x128
// (TM=TN=8) for large ones (more reuse per load).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <sstream>

#include "ftcc/tensor/cuda/check.cuh"
#include "ftcc/tensor/cuda/kernels.hpp"

namespace ftcc::tensor::cuda {

namespace {

template <class T, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    gemm_tiled(bool ta, bool tb, i64 m, i64 n, i64 k, const T* __restrict__ a, const T* __restrict__ b,
               T* __restrict__ c, const T* __restrict__ bias, bool accumulate) {
  constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
  static_assert((BM * BK) % NT == 0 && (BK * BN) % NT == 0, "tile loads must divide evenly");
  // +1 column: the tile stores of a non-contiguous operand (A untransposed, B transposed) walk k
  // fastest, i.e. down a column; the padding puts those 16 or 8 words in different banks.
  __shared__ T As[BK][BM + 1];
  __shared__ T Bs[BK][BN + 1];
  const int tid = threadIdx.x;
  const int tx = tid % TX, ty = tid / TX;
  const i64 row0 = static_cast<i64>(blockIdx.y) * BM, col0 = static_cast<i64>(blockIdx.x) * BN;

  T acc[TM][TN];
#pragma unroll
  for (int r = 0; r < TM; ++r)
#pragma unroll
    for (int s = 0; s < TN; ++s) acc[r][s] = T(0);

  for (i64 p0 = 0; p0 < k; p0 += BK) {
#pragma unroll
    for (int l0 = 0; l0 < BM * BK; l0 += NT) {
      int l = l0 + tid;
      // Walk the tile in the operand's memory order: k fastest when A is not transposed.
      int i = ta ? l % BM : l / BK;
      int p = ta ? l / BM : l % BK;
      i64 gi = row0 + i, gp = p0 + p;
      T v = T(0);
      if (gi < m && gp < k) v = ta ? a[gp * m + gi] : a[gi * k + gp];
      As[p][i] = v;
    }
#pragma unroll
    for (int l0 = 0; l0 < BK * BN; l0 += NT) {
      int l = l0 + tid;
      int j = tb ? l / BK : l % BN;
      int p = tb ? l % BK : l / BN;
      i64 gj = col0 + j, gp = p0 + p;
      T v = T(0);
      if (gj < n && gp < k) v = tb ? b[gj * k + gp] : b[gp * n + gj];
      Bs[p][j] = v;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      T af[TM], bf[TN];
      // Rows ty + TY*r and columns tx + TX*s: neighbouring threads read neighbouring words.
#pragma unroll
      for (int r = 0; r < TM; ++r) af[r] = As[p][ty + TY * r];
#pragma unroll
      for (int s = 0; s < TN; ++s) bf[s] = Bs[p][tx + TX * s];
#pragma unroll
      for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int s = 0; s < TN; ++s) acc[r][s] += af[r] * bf[s];
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < TM; ++r) {
    i64 gi = row0 + ty + TY * r;
    if (gi >= m) continue;
#pragma unroll
    for (int s = 0; s < TN; ++s) {
      i64 gj = col0 + tx + TX * s;
      if (gj >= n) continue;
      T v = acc[r][s];
      if (bias != nullptr) v += bias[gj];
      T* out = c + gi * n + gj;
      *out = accumulate ? *out + v : v;
    }
  }
}

// C = 0 (+ bias) when k == 0: the product is empty but the contract still defines C.
template <class T>
__global__ void gemm_empty_k(i64 m, i64 n, T* c, const T* bias, bool accumulate) {
  for (i64 idx = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; idx < m * n;
       idx += static_cast<i64>(gridDim.x) * blockDim.x) {
    T v = bias ? bias[idx % n] : T(0);
    c[idx] = accumulate ? c[idx] + v : v;
  }
}

template <class T, int BM, int BN, int BK, int TM, int TN>
void launch(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, const T* b, T* c, const T* bias, bool accumulate) {
  dim3 grid(static_cast<unsigned>((n + BN - 1) / BN), static_cast<unsigned>((m + BM - 1) / BM));
  FTCC_CHECK(grid.y <= 65535u) << "gemm: " << m << " rows exceed the grid limit";
  gemm_tiled<T, BM, BN, BK, TM, TN><<<grid, (BM / TM) * (BN / TN)>>>(ta, tb, m, n, k, a, b, c, bias, accumulate);
  FTCC_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void gemm(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, const T* b, T* c, const T* bias, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    gemm_empty_k<T><<<detail::grid_for(m * n, 256), 256>>>(m, n, c, bias, accumulate);
    FTCC_CUDA_CHECK_LAUNCH();
    return;
  }
  // The large tile needs enough blocks to fill the device: about 1024 tiles of 128x128.
  if (m * n >= (1LL << 24)) {
    launch<T, 128, 128, 8, 8, 8>(ta, tb, m, n, k, a, b, c, bias, accumulate);
  } else {
    launch<T, 64, 64, 16, 4, 4>(ta, tb, m, n, k, a, b, c, bias, accumulate);
  }
}

// ---- cuBLAS reference -------------------------------------------------------------------------

namespace {

#define FTCC_CUBLAS_CHECK(call)                                                                           \
  do {                                                                                                    \
    cublasStatus_t st_ = (call);                                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                   \
      std::ostringstream os_;                                                                             \
      os_ << __FILE__ << ':' << __LINE__ << ": cuBLAS call failed: " #call ": " << cublasGetStatusString(st_); \
      throw ::ftcc::Error(os_.str());                                                                     \
    }                                                                                                     \
  } while (0)

cublasHandle_t handle() {
  // One handle per thread: cuBLAS handles are not safe to share between host threads.
  thread_local cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    FTCC_CUBLAS_CHECK(cublasCreate(&x));
    return x;
  }();
  return h;
}

}  // namespace

template <class T>
void gemm_cublas(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, const T* b, T* c, bool accumulate) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and reuse
  // each buffer as its own transpose, so nothing is copied.
  const T alpha = T(1), beta = accumulate ? T(1) : T(0);
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  if constexpr (sizeof(T) == 4) {
    FTCC_CUBLAS_CHECK(cublasSgemm(handle(), opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                  &alpha, b, ldb, a, lda, &beta, c, static_cast<int>(n)));
  } else {
    FTCC_CUBLAS_CHECK(cublasDgemm(handle(), opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                  &alpha, b, ldb, a, lda, &beta, c, static_cast<int>(n)));
  }
}

template void gemm<float>(bool, bool, i64, i64, i64, const float*, const float*, float*, const float*, bool);
template void gemm<double>(bool, bool, i64, i64, i64, const double*, const double*, double*, const double*, bool);
template void gemm_cublas<float>(bool, bool, i64, i64, i64, const float*, const float*, float*, bool);
template void gemm_cublas<double>(bool, bool, i64, i64, i64, const double*, const double*, double*, bool);

}  // namespace ftcc::tensor::cuda
