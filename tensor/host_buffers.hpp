// tensor/host_buffers.hpp: where CPU tensors get their memory: 64-byte aligned buffers, reused.
//
// A training step allocates the same shapes every step (activations, gradients of activations,
// temporaries). The system allocator hands large buffers back to the kernel when they are freed
// (glibc's mmap threshold), so each step would page-fault its memory in again. Instead, a freed
// buffer goes to a free list kept per size (rounded up to 64 bytes), and the next request of that
// size takes it: after the first step, a loop of fixed shapes makes no system allocation.
//
// Bounds: the cache keeps at most kMaxCachedHostBytes of free buffers (lists of exact sizes: a
// run whose shapes vary keeps some of each); a buffer freed beyond that goes back to the system.
// host_buffers_release() empties it (the trainers call it once their data is prepared).
//
// A freed buffer is handed to the very next tensor of its size. So a buffer that an operation may
// still read or write after it is freed (an abandoned MPI send or receive after a failure) must
// not be a tensor's: such buffers are kept alive by their owner (train/pinned_buffers.hpp, the
// gradient arena, comm/'s scratch).
// Thread-safe (one mutex; a cached allocation is a map lookup). Never throws except std::bad_alloc.
// No caching under AddressSanitizer (a reused buffer would hide a use after free) or when the
// environment sets FTCC_NO_HOST_CACHE=1: every buffer then comes from, and goes back to, the system.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ftcc::tensor {

inline constexpr std::size_t kMaxCachedHostBytes = std::size_t{256} << 20;

// A buffer of at least `bytes` (at least one 64-byte line), 64-byte aligned.
void* host_buffer_alloc(std::size_t bytes);
// Returns a buffer from host_buffer_alloc(bytes), with the same `bytes`.
void host_buffer_free(void* p, std::size_t bytes) noexcept;

struct HostBufferStats {
  std::uint64_t system_allocs = 0;  // buffers the system allocator had to provide
  std::uint64_t reused = 0;         // requests served from the cache
  std::size_t cached_bytes = 0;     // free buffers held now
  bool caching = true;              // false under ASan or FTCC_NO_HOST_CACHE=1
};
HostBufferStats host_buffer_stats();
// Frees every cached buffer.
void host_buffers_release() noexcept;

}  // namespace ftcc::tensor
