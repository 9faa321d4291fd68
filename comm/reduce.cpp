// reduce: pipelined binomial-tree reduction to root (comm/tree_phases.hpp). Ranks that all run on
// one host: through shared memory (shm_collectives.cpp); on several hosts, some with several
// ranks: hierarchical (hierarchical_collectives.cpp).
#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/tree_phases.hpp"

namespace ftcc::comm {

void reduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root,
            const CollectiveOptions& o) {
  FTCC_CHECK(root >= 0 && root < comm.size()) << "reduce root " << root << " of " << comm.size();
  const bool is_root = comm.rank() == root;
  FTCC_CHECK(!is_root || recv != nullptr || count == 0) << "reduce: the root needs a receive buffer";
  if (!send) send = recv;
  const std::size_t bytes = count * dtype_size(dtype);
  void* out = is_root ? recv : nullptr;
  if (detail::ShmSegment::Channel* ch = detail::blocking_channel(comm)) {
    const bool one_host = ch->hosts() == 1;
    OpContext ctx(comm, one_host ? "shm_reduce" : "hierarchical_reduce", o.timeout_s, collective_key("reduce", count, static_cast<int>(dtype), static_cast<int>(op), root));
    detail::with_host_buffers(send, bytes, out, send == out ? bytes : 0, out ? bytes : 0, [&](const void* s, void* r) {
      if (one_host)
        detail::shm_reduce_run(ctx, *ch, s ? s : r, r, count, dtype, op, root);
      else
        detail::hierarchical_reduce_run(ctx, *ch, s ? s : r, r, count, dtype, op, root);
    });
    return;
  }
  OpContext ctx(comm, "reduce", o.timeout_s, collective_key("reduce", count, static_cast<int>(dtype), static_cast<int>(op), root));
  const detail::TreeParams p{
      detail::pick_segment_bytes(o.segment_bytes, detail::kTreeSegmentBytes, count * dtype_size(dtype),
                                 detail::kMaxTreeSegments),
      o.window > 0 ? o.window : detail::kWindow};
  // Non-roots stage partial results in scratch (acc = nullptr), never in their recv.
  detail::with_host_buffers(send, bytes, out, send == out ? bytes : 0, out ? bytes : 0, [&](const void* s, void* r) {
    detail::tree_reduce(ctx, s ? s : r, r, count, dtype, op, detail::binomial_tree(comm.rank(), comm.size(), root, false), p);
  });
}

}  // namespace ftcc::comm
