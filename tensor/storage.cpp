#include "ftcc/tensor/storage.hpp"

#include <atomic>
#include <cstring>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/cuda/backend.hpp"
#include "ftcc/tensor/host_buffers.hpp"

namespace ftcc::tensor {
namespace {

std::atomic<std::size_t> g_live{0}, g_peak{0};

void count_alloc(std::size_t bytes) noexcept {
  const std::size_t now = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

TensorMemory cpu_tensor_memory() noexcept {
  return {g_live.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed)};
}

void reset_peak_cpu_tensor_memory() noexcept { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

Storage::Storage(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (device == Device::CPU) {
    data_ = host_buffer_alloc(bytes);  // never null, even for zero bytes
    count_alloc(bytes);
  } else {
    data_ = cuda::backend().device_alloc(bytes == 0 ? 1 : bytes);
  }
}

Storage::~Storage() {
  if (device_ == Device::CPU) {
    host_buffer_free(data_, bytes_);
    g_live.fetch_sub(bytes_, std::memory_order_relaxed);
  } else if (const cuda::Backend* b = cuda::find_backend()) {
    // A CUDA buffer was allocated through a backend, and a backend is never unloaded.
    b->device_free(data_);
  }
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::CPU && src_dev == Device::CPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda::backend().copy(dst, dst_dev == Device::CUDA, src, src_dev == Device::CUDA, bytes);
}

int cuda_device_count() noexcept {
  const cuda::Backend* b = cuda::find_backend();
  return b != nullptr ? b->device_count() : 0;
}

bool cuda_available() noexcept { return cuda_device_count() > 0; }

void set_cuda_device(int ordinal) {
  const cuda::Backend& b = cuda::backend();
  const int n = b.device_count();
  FTCC_CHECK_T(::ftcc::Error, ordinal >= 0 && ordinal < n)
      << "CUDA device " << ordinal << " asked for, this process sees " << n << " (CUDA_VISIBLE_DEVICES limits them)";
  b.set_device(ordinal);
}

}  // namespace ftcc::tensor
