// tensor/storage.hpp: one owned, untyped buffer on the CPU or a CUDA device.
//
// Tensors and their views hold a Storage through a shared_ptr, so a row slice keeps the whole
// buffer alive and writes through a view are seen by every other view. CPU buffers are 64-byte
// aligned (Eigen's vector loads, cache lines) and reused (tensor/host_buffers.hpp); CUDA buffers
// come from cudaMalloc, reached through the CUDA backend (tensor/cuda/backend.hpp), which throws
// ftcc::Error when there is none.
#pragma once

#include <cstddef>

#include "ftcc/tensor/dtype.hpp"

namespace ftcc::tensor {

class Storage {
 public:
  Storage(std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
};

// Bytes held by the storages of CPU tensors now (live), and the most held at once since the
// process started or since the last reset_peak_cpu_tensor_memory() (peak): the host memory
// counterpart of torch.cuda.memory_allocated / max_memory_allocated. Thread-safe, never throws.
struct TensorMemory {
  std::size_t live = 0, peak = 0;
};
TensorMemory cpu_tensor_memory() noexcept;
void reset_peak_cpu_tensor_memory() noexcept;  // peak = live

// Copies `bytes` between any two devices (host<->device, device<->device, host<->host).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes);

// Usable CUDA devices: 0 when the build has no CUDA, when libftcc_cuda.so is not found
// (tensor/cuda/backend.hpp), or when no driver or device answers. Never throws.
int cuda_device_count() noexcept;
// cuda_device_count() > 0.
bool cuda_available() noexcept;
// Makes CUDA device `ordinal` the one this thread's CUDA tensors are made on from now on (the
// default is device 0). Throws ftcc::Error when there is no backend or no such device.
void set_cuda_device(int ordinal);

}  // namespace ftcc::tensor
