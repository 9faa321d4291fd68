// pytorch/csrc/host_block_pool.cpp: the pool of freed result blocks (host_block_pool.hpp).
#include "host_block_pool.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

namespace ftcc::torch_backend {
namespace {

class Pool {
 public:
  void* take(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = free_.find(bytes); it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        free_bytes_ -= bytes;
        return p;
      }
    }
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes) != 0) throw std::bad_alloc();
    return p;
  }

  void give(void* p, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (free_.size() < kMaxFreeBlocks && free_bytes_ + bytes <= kMaxFreeBytes) {
        free_.emplace(bytes, p);
        free_bytes_ += bytes;
        return;
      }
    }
    std::free(p);
  }

  HostBlockPoolState state() {
    std::lock_guard<std::mutex> lock(mu_);
    return {free_.size(), free_bytes_};
  }

 private:
  std::mutex mu_;
  std::multimap<std::size_t, void*> free_;
  std::size_t free_bytes_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors freed during exit still give back to it
  return *p;
}

}  // namespace

at::Tensor pooled_host_empty(at::ScalarType dtype, std::int64_t n) {
  const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
  const std::size_t bytes = static_cast<std::size_t>(n) * c10::elementSize(dtype);
  if (bytes < kPooledFrom) return at::empty({n}, options);
  void* p = pool().take(bytes);
  return at::from_blob(p, {n}, [bytes](void* q) { pool().give(q, bytes); }, options);
}

HostBlockPoolState host_block_pool_state() { return pool().state(); }

}  // namespace ftcc::torch_backend
