// barrier: dissemination. Round k: tell rank r+2^k, hear from rank r-2^k; after ceil(log2 n)
// rounds every rank has (transitively) heard from every other, so all have entered. Ranks that all
// run on one host: one round of flags in shared memory (shm_collectives.cpp).
#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/blocks.hpp"

namespace ftcc::comm {

void barrier(Communicator& comm, const CollectiveOptions& o) {
  if (detail::ShmSegment::Channel* ch = detail::one_host_channel(comm)) {  // every rank on this host
    OpContext ctx(comm, "shm_barrier", o.timeout_s);
    detail::shm_barrier_run(ctx, *ch);
    return;
  }
  OpContext ctx(comm, "barrier", o.timeout_s);
  const int n = comm.size(), r = comm.rank();
  for (int dist = 1; dist < n; dist <<= 1) {
    OpContext::Handle h[2] = {ctx.irecv(nullptr, 0, detail::mod(r - dist, n)),
                              ctx.isend(nullptr, 0, detail::mod(r + dist, n))};
    ctx.wait_all(h, 2);
  }
}

}  // namespace ftcc::comm
