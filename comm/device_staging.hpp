// comm/device_staging.hpp: CUDA device buffers in the collectives, staged through pinned host
// memory (internal; used by the public calls in comm/collectives.hpp and allreduce_async).
//
// comm/ does not link CUDA. The CUDA driver library is looked up with dlopen(RTLD_NOLOAD): while
// the process has not loaded libcuda.so.1 itself (a CPU-only program, or one that has not touched
// CUDA yet), no pointer can be device memory, and the check costs a look at the loader's count of
// loaded objects (it is looked up again once that count changes). Otherwise cuPointerGetAttribute tells device from
// host memory, and a device buffer is copied into pinned host memory (cuMemAllocHost, kept per
// thread and reused), the collective runs on the host copy, and the result is copied back.
// The reductions run on the CPU, so even a CUDA-aware MPI would not spare the copies for
// allreduce/reduce; broadcast and allgather could hand device pointers to such an MPI (not done).
#pragma once

#include <cstddef>
#include <functional>

namespace ftcc::comm::detail {

// True when p is CUDA device (or managed) memory; false when the CUDA driver is not loaded.
bool is_device_pointer(const void* p);

// Runs fn(host_send, host_recv) on host copies when send or recv is device memory, else on the
// buffers themselves. send_bytes of send are copied in (send may equal recv: in place; send may be
// nullptr); recv_in_bytes of recv are copied in too (in-place inputs, the broadcast root's data),
// and recv_out_bytes of recv are copied back afterwards.
void with_host_buffers(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_in_bytes,
                       std::size_t recv_out_bytes, const std::function<void(const void*, void*)>& fn);

}  // namespace ftcc::comm::detail
