// barrier: dissemination. Round k: tell rank r+2^k, hear from rank r-2^k; after ceil(log2 n)
// rounds every rank has (transitively) heard from every other, so all have entered. Ranks that all
// run on one host: one round of flags in shared memory (shm_collectives.cpp); on several hosts,
// some with several ranks: hierarchical (hierarchical_collectives.cpp).
#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/blocks.hpp"

namespace ftcc::comm {
namespace detail {

void dissemination_barrier(OpContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  for (int dist = 1; dist < n; dist <<= 1) {
    OpContext::Handle h[2] = {ctx.irecv(nullptr, 0, mod(r - dist, n)), ctx.isend(nullptr, 0, mod(r + dist, n))};
    ctx.wait_all(h, 2);
  }
}

}  // namespace detail

void barrier(Communicator& comm, const CollectiveOptions& o) {
  if (detail::ShmSegment::Channel* ch = detail::blocking_channel(comm)) {
    const bool one_host = ch->hosts() == 1;
    OpContext ctx(comm, one_host ? "shm_barrier" : "hierarchical_barrier", o.timeout_s, collective_key("barrier", 0));
    if (one_host)
      detail::shm_barrier_run(ctx, *ch);
    else
      detail::hierarchical_barrier_run(ctx, *ch);
    return;
  }
  OpContext ctx(comm, "barrier", o.timeout_s, collective_key("barrier", 0));
  detail::dissemination_barrier(ctx);
}

}  // namespace ftcc::comm
