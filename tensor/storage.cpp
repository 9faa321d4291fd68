#include "ftcc/tensor/storage.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "ftcc/base/error.hpp"
#include "ftcc_config.hpp"
#include "ftcc/tensor/cuda/runtime.hpp"

namespace ftcc::tensor {

Storage::Storage(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (device == Device::CPU) {
    // aligned_alloc needs a size that is a multiple of the alignment; zero-size buffers still get
    // one line so that data() is never null.
    std::size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    data_ = std::aligned_alloc(64, rounded);
    if (data_ == nullptr) throw std::bad_alloc();
  } else {
    data_ = cuda::device_alloc(bytes == 0 ? 1 : bytes);
  }
}

Storage::~Storage() {
  if (device_ == Device::CPU) {
    std::free(data_);
  } else {
    cuda::device_free(data_);
  }
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::CPU && src_dev == Device::CPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda::copy(dst, dst_dev == Device::CUDA, src, src_dev == Device::CUDA, bytes);
}

bool cuda_available() { return cuda::device_count() > 0; }

}  // namespace ftcc::tensor
