// Tree allreduce: pipelined binomial-tree reduce to rank 0, then pipelined binomial broadcast
// from rank 0 (comm/tree_phases.hpp). 2 ceil(log2 n) hops: the latency choice for small messages.
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/tree_phases.hpp"

namespace ftcc::comm {
namespace detail {

void tree_allreduce_run(OpContext& ctx, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                        std::size_t segment_bytes, int window) {
  if (count == 0) return;
  if (ctx.size() == 1) {
    if (send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
    return;
  }
  const TreeParams p{
      pick_segment_bytes(segment_bytes, kTreeSegmentBytes, count * dtype_size(dtype), kMaxTreeSegments),
      window > 0 ? window : kWindow};
  // Up: every rank with children stages its partial sum in recv (its output buffer anyway).
  tree_reduce(ctx, send, recv, count, dtype, op, binomial_tree(ctx.rank(), ctx.size(), 0, false), p);
  // Down: the same tree, largest subtree first.
  tree_broadcast(ctx, recv, count * dtype_size(dtype), binomial_tree(ctx.rank(), ctx.size(), 0, true), p);
}

}  // namespace detail

void tree_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                    const CollectiveOptions& o) {
  OpContext ctx(comm, "tree_allreduce", o.timeout_s, collective_key("allreduce", count, static_cast<int>(dtype), static_cast<int>(op)));
  const std::size_t bytes = count * dtype_size(dtype);
  detail::with_host_buffers(send, bytes, recv, send && send != recv ? 0 : bytes, bytes, [&](const void* s, void* r) {
    detail::tree_allreduce_run(ctx, s ? s : r, r, count, dtype, op, o.segment_bytes, o.window);
  });
}

}  // namespace ftcc::comm
