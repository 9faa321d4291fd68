// tensor/storage.hpp: one owned, untyped buffer on the CPU or a CUDA device.
//
// Tensors and their views hold a Storage through a shared_ptr, so a row slice keeps the whole
// buffer alive and writes through a view are seen by every other view. CPU buffers are 64-byte
// aligned (Eigen's vector loads, cache lines); CUDA buffers come from cudaMalloc.
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

// Copies `bytes` between any two devices (host<->device, device<->device, host<->host).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes);

// True when this build has CUDA and at least one device answers; never throws.
bool cuda_available();

}  // namespace ftcc::tensor
