// pytorch/csrc/host_block_pool.hpp: host tensors for collective results, from a small pool of
// freed blocks.
//
// Why: every collective computes its result into a new host tensor (it must leave the caller's
// input intact to run again after a failure, and a survivor keeps its result for the others; see
// op_task.hpp). A new block from malloc is new pages: glibc maps blocks of 32 MiB and more afresh
// on every call, and the first touch of each page faults. At 64 MiB those faults cost more than
// the allreduce itself. Blocks of kPooledFrom bytes or more are therefore kept when their tensor
// is freed and handed out again for the next result of the same size.
//
// Bounds: at most kMaxFreeBlocks free blocks and kMaxFreeBytes free bytes are kept; a block that
// would exceed them is returned to the system. Thread-safe (a tensor may be freed on any thread).
// The pool lives until the process ends (a tensor freed during exit still finds it).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

namespace ftcc::torch_backend {

constexpr std::size_t kPooledFrom = std::size_t{1} << 20;
constexpr std::size_t kMaxFreeBlocks = 8;
constexpr std::size_t kMaxFreeBytes = std::size_t{512} << 20;

// A flat, contiguous CPU tensor of n elements of `dtype`, uninitialized; pooled from kPooledFrom
// bytes up, else plain at::empty.
at::Tensor pooled_host_empty(at::ScalarType dtype, std::int64_t n);

// Free blocks held now, and their bytes (for the tests).
struct HostBlockPoolState {
  std::size_t free_blocks = 0;
  std::size_t free_bytes = 0;
};
HostBlockPoolState host_block_pool_state();

}  // namespace ftcc::torch_backend
