// Ring allreduce: ring reduce-scatter then ring allgather (comm/ring_phases.hpp), each n-1 steps
// of one block per rank, segmented and pipelined. Any count: blocks differ by at most one element
// and may be empty (count < size).
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/ring_phases.hpp"

namespace ftcc::comm {
namespace detail {

void ring_allreduce_run(OpContext& ctx, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                        std::size_t segment_bytes, int window) {
  if (count == 0) return;
  if (ctx.size() == 1) {
    if (send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
    return;
  }
  const auto blocks = balanced_blocks(count, ctx.size());
  const std::size_t block_bytes = blocks[0].count * dtype_size(dtype);  // the largest block
  const RingParams p{pick_segment_bytes(segment_bytes, kRingSegmentBytes, block_bytes, kMaxRingSegments),
                     window > 0 ? window : kWindow};
  ring_reduce_scatter(ctx, send, recv, blocks, dtype, op, p);  // recv[block rank] is final
  ring_allgather(ctx, recv, blocks, dtype, p);                 // every block from its owner
}

}  // namespace detail

void ring_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                    const CollectiveOptions& o) {
  OpContext ctx(comm, "ring_allreduce", o.timeout_s, collective_key("allreduce", count, static_cast<int>(dtype), static_cast<int>(op)));
  const std::size_t bytes = count * dtype_size(dtype);
  detail::with_host_buffers(send, bytes, recv, send && send != recv ? 0 : bytes, bytes, [&](const void* s, void* r) {
    detail::ring_allreduce_run(ctx, s ? s : r, r, count, dtype, op, o.segment_bytes, o.window);
  });
}

}  // namespace ftcc::comm
