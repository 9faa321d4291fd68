#include <cuda_runtime.h>

#include "ftcc/tensor/cuda/check.cuh"
#include "ftcc/tensor/cuda/runtime.hpp"

namespace ftcc::tensor::cuda {

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  FTCC_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void device_free(void* p) noexcept {
  // Destructors must not throw; a failing free means the context is already broken and the next
  // checked call will report it.
  if (p != nullptr) (void)cudaFree(p);
}

void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, std::size_t bytes) {
  cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                      : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  // Synchronous copy: host buffers may be freed as soon as this returns.
  FTCC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

void synchronize() { FTCC_CUDA_CHECK(cudaDeviceSynchronize()); }

void set_device(int ordinal) { FTCC_CUDA_CHECK(cudaSetDevice(ordinal)); }

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace ftcc::tensor::cuda
