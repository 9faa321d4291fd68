// alltoallv: every rank sends a block to every rank (MPI_Alltoallv). All receives are posted first,
// then the sends in the order r+1, r+2, ... (rank r's first send goes to its right neighbour, so
// no rank is the first destination of everyone), the own block is copied locally. Ranks that all
// run on one host: the counts through shared memory, and the data too when no rank sends more than
// kShmAlltoallBytes (shm_collectives.cpp).
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/blocks.hpp"

namespace ftcc::comm {

void alltoallv(Communicator& comm, const void* send, const std::size_t* send_counts, const std::size_t* send_displs,
               void* recv, const std::size_t* recv_counts, const std::size_t* recv_displs, DType dtype,
               const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t esz = dtype_size(dtype);
  if (detail::ShmSegment::Channel* ch = detail::one_host_channel(comm)) {
    OpContext ctx(comm, "shm_alltoall", o.timeout_s, collective_key("alltoallv", esz));
    if (detail::shm_alltoallv_run(ctx, *ch, send, send_counts, send_displs, recv, recv_counts, recv_displs, esz)) return;
  }  // else (every rank alike) the data goes point-to-point, as a collective of its own
  OpContext ctx(comm, "alltoall", o.timeout_s, collective_key("alltoallv", esz));
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  std::vector<OpContext::Handle> hs;
  hs.reserve(2 * static_cast<std::size_t>(n));
  for (int k = 1; k < n; ++k) {
    const int from = detail::mod(r - k, n);
    hs.push_back(ctx.irecv(out + recv_displs[from] * esz, recv_counts[from] * esz, from));
  }
  for (int k = 1; k < n; ++k) {
    const int to = detail::mod(r + k, n);
    hs.push_back(ctx.isend(in + send_displs[to] * esz, send_counts[to] * esz, to));
  }
  FTCC_CHECK(send_counts[r] == recv_counts[r])
      << "alltoall: rank " << r << " sends itself " << send_counts[r] << " elements but expects " << recv_counts[r];
  if (send_counts[r] > 0) std::memmove(out + recv_displs[r] * esz, in + send_displs[r] * esz, send_counts[r] * esz);
  ctx.wait_all(hs.data(), hs.size());
}

}  // namespace ftcc::comm
