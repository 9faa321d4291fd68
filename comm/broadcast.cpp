// broadcast: binomial tree (ceil(log2 n) hops, the root sends ceil(log2 n) copies) or pipelined
// chain (n-1 hops, but every link busy at once: time ~ bytes/bandwidth + (n-2) segments); `auto`
// on ranks that all run on one host: shared memory (shm_collectives.cpp); on several hosts, some
// with several ranks: hierarchical (hierarchical_collectives.cpp).
#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/tree_phases.hpp"

namespace ftcc::comm {

void broadcast(Communicator& comm, void* buf, std::size_t count, DType dtype, int root, const BroadcastOptions& o) {
  FTCC_CHECK(root >= 0 && root < comm.size()) << "broadcast root " << root << " of " << comm.size();
  const std::size_t bytes = count * dtype_size(dtype);
  if (o.algo == BroadcastAlgo::automatic)
    if (detail::ShmSegment::Channel* ch = detail::blocking_channel(comm)) {
      const bool one_host = ch->hosts() == 1;
      OpContext ctx(comm, one_host ? "shm_broadcast" : "hierarchical_broadcast", o.timeout_s);
      detail::with_host_buffers(nullptr, 0, buf, comm.rank() == root ? bytes : 0, bytes, [&](const void*, void* b) {
        if (one_host)
          detail::shm_broadcast_run(ctx, *ch, b, bytes, root);
        else
          detail::hierarchical_broadcast_run(ctx, *ch, b, bytes, root);
      });
      return;
    }
  BroadcastAlgo algo = o.algo;
  // Measured on 4 ranks (docs/collectives.md): binomial beat the chain at every size (its depth
  // is 2 against the chain's 3). The chain's pipeline pays off with more ranks (by the usual
  // cost model; not measured here), so it is used above 1 MiB on more than 4 ranks.
  if (algo == BroadcastAlgo::automatic)
    algo = bytes >= kChainBroadcastBytes && comm.size() > kChainBroadcastMinRanks ? BroadcastAlgo::chain
                                                                                  : BroadcastAlgo::binomial;
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
