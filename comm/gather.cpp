// gather and scatter: linear, root to every rank (MPI_Gather / MPI_Scatter). The root posts all
// its receives (sends) at once; the other ranks make one send (receive). Block r is rank r's.
// Ranks that all run on one host: through shared memory (shm_collectives.cpp); on several hosts,
// some with several ranks: hierarchical (hierarchical_collectives.cpp).
#include <cstring>

#include "ftcc/comm/algorithms.hpp"

namespace ftcc::comm {

void gather(Communicator& comm, const void* send, void* recv, std::size_t send_count, DType dtype, int root,
            const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  FTCC_CHECK(root >= 0 && root < n) << "gather: root " << root << " is not a rank of a group of " << n;
  const std::size_t bytes = send_count * dtype_size(dtype);
  if (detail::ShmSegment::Channel* ch = detail::blocking_channel(comm)) {
    const bool one_host = ch->hosts() == 1;
    OpContext ctx(comm, one_host ? "shm_gather" : "hierarchical_gather", o.timeout_s, collective_key("gather", bytes, -1, -1, root));
    if (bytes == 0) return;
    if (!send) send = static_cast<std::byte*>(recv) + static_cast<std::size_t>(r) * bytes;  // in place (the root)
    if (one_host)
      detail::shm_gather_run(ctx, *ch, send, recv, bytes, root);
    else
      detail::hierarchical_gather_run(ctx, *ch, send, recv, bytes, root);
    return;
  }
  OpContext ctx(comm, "gather", o.timeout_s, collective_key("gather", bytes, -1, -1, root));
  if (r != root) {
    ctx.wait(ctx.isend(send, bytes, root));
    return;
  }
  auto* out = static_cast<std::byte*>(recv);
  std::vector<OpContext::Handle> hs;
  for (int p = 0; p < n; ++p)
    if (p != root) hs.push_back(ctx.irecv(out + static_cast<std::size_t>(p) * bytes, bytes, p));
  std::byte* mine = out + static_cast<std::size_t>(root) * bytes;
  if (send && send != mine && bytes > 0) std::memcpy(mine, send, bytes);
  ctx.wait_all(hs.data(), hs.size());
}

void scatter(Communicator& comm, const void* send, void* recv, std::size_t recv_count, DType dtype, int root,
             const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  FTCC_CHECK(root >= 0 && root < n) << "scatter: root " << root << " is not a rank of a group of " << n;
  const std::size_t bytes = recv_count * dtype_size(dtype);
  if (detail::ShmSegment::Channel* ch = detail::blocking_channel(comm)) {
    const bool one_host = ch->hosts() == 1;
    OpContext ctx(comm, one_host ? "shm_scatter" : "hierarchical_scatter", o.timeout_s, collective_key("scatter", bytes, -1, -1, root));
    if (bytes == 0) return;
    if (one_host)
      detail::shm_scatter_run(ctx, *ch, send, recv, bytes, root);
    else
      detail::hierarchical_scatter_run(ctx, *ch, send, recv, bytes, root);
    return;
  }
  OpContext ctx(comm, "scatter", o.timeout_s, collective_key("scatter", bytes, -1, -1, root));
  if (r != root) {
    ctx.wait(ctx.irecv(recv, bytes, root));
    return;
  }
  const auto* in = static_cast<const std::byte*>(send);
  std::vector<OpContext::Handle> hs;
  for (int p = 0; p < n; ++p)
    if (p != root) hs.push_back(ctx.isend(in + static_cast<std::size_t>(p) * bytes, bytes, p));
  const std::byte* mine = in + static_cast<std::size_t>(root) * bytes;
  if (recv && recv != mine && bytes > 0) std::memcpy(recv, mine, bytes);
  ctx.wait_all(hs.data(), hs.size());
}

}  // namespace ftcc::comm
