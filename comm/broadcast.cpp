// broadcast: binomial tree below kChainBroadcastBytes (ceil(log2 n) hops), pipelined chain above
// it (n-1 hops, but every link busy at once: time ~ bytes/bandwidth + (n-2) segments).
#include "comm/algorithms.hpp"
#include "comm/device_staging.hpp"
#include "comm/blocks.hpp"
#include "comm/tree_phases.hpp"

namespace ftcc::comm {

void broadcast(Communicator& comm, void* buf, std::size_t count, DType dtype, int root, const BroadcastOptions& o) {
  FTCC_CHECK(root >= 0 && root < comm.size()) << "broadcast root " << root << " of " << comm.size();
  const std::size_t bytes = count * dtype_size(dtype);
  BroadcastAlgo algo = o.algo;
  if (algo == BroadcastAlgo::automatic)
    algo = bytes < kChainBroadcastBytes ? BroadcastAlgo::binomial : BroadcastAlgo::chain;
  const bool chain = algo == BroadcastAlgo::chain;
  OpContext ctx(comm, chain ? "chain_broadcast" : "binomial_broadcast", o.timeout_s);
  const detail::TreeParams p{
      chain ? detail::pick_segment_bytes(o.segment_bytes, detail::kChainSegmentBytes, bytes, detail::kMaxChainSegments)
            : detail::pick_segment_bytes(o.segment_bytes, detail::kTreeSegmentBytes, bytes, detail::kMaxTreeSegments),
      o.window > 0 ? o.window : detail::kWindow};
  const auto tree = chain ? detail::chain_tree(comm.rank(), comm.size(), root)
                          : detail::binomial_tree(comm.rank(), comm.size(), root, true);
  detail::with_host_buffers(nullptr, 0, buf, comm.rank() == root ? bytes : 0, bytes,
                            [&](const void*, void* b) { detail::tree_broadcast(ctx, b, bytes, tree, p); });
}

}  // namespace ftcc::comm
