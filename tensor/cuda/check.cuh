// tensor/cuda/check.cuh: FTCC_CUDA_CHECK(call) and FTCC_CUDA_CHECK_LAUNCH() throw ftcc::Error with
// file:line, the failing expression and CUDA's own error string. Library code never exits.
#pragma once

#include <cuda_runtime.h>

#include <sstream>

#include "ftcc/base/error.hpp"

namespace ftcc::tensor::cuda::detail {
[[noreturn]] inline void raise_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << file << ':' << line << ": CUDA call failed: " << expr << ": " << cudaGetErrorName(e) << " ("
     << cudaGetErrorString(e) << ")";
  throw ::ftcc::Error(os.str());
}
}  // namespace ftcc::tensor::cuda::detail

#define FTCC_CUDA_CHECK(call)                                                          \
  do {                                                                                 \
    cudaError_t ftcc_cuda_err_ = (call);                                               \
    if (ftcc_cuda_err_ != cudaSuccess)                                                 \
      ::ftcc::tensor::cuda::detail::raise_cuda(ftcc_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: catches bad configurations at once (asynchronous faults surface at the
// next synchronising call, which is checked too).
#define FTCC_CUDA_CHECK_LAUNCH() FTCC_CUDA_CHECK(cudaGetLastError())

namespace ftcc::tensor::cuda::detail {
// Grid size for n elements with `block` threads, capped so that grid-stride loops cover the rest.
inline unsigned grid_for(long long n, int block) {
  long long g = (n + block - 1) / block;
  if (g < 1) g = 1;
  if (g > 65535LL * 8) g = 65535LL * 8;
  return static_cast<unsigned>(g);
}
}  // namespace ftcc::tensor::cuda::detail
