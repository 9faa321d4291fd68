// reduce_scatter (MPI_Reduce_scatter_block semantics). Small totals on 2^k ranks: recursive
// halving, log2 n exchanges (step k hands the half of the current block range that does not hold
// block r to rank r xor 2^k and reduces the half that does). Otherwise the ring reduce-scatter
// phase: n-1 steps, the partial blocks travel through scratch; block r lands on rank r. Ranks that
// all run on one host: through shared memory (shm_collectives.cpp); on several hosts, some with
// several ranks: hierarchical (hierarchical_collectives.cpp).
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/reduce_kernels.hpp"
#include "ftcc/comm/ring_phases.hpp"

namespace ftcc::comm {

namespace {

void run(OpContext& ctx, const void* send, void* recv, int n, int r, std::size_t recv_count, DType dtype, ReduceOp op,
         const CollectiveOptions& o) {
  const std::size_t esz = dtype_size(dtype);
  const auto* in = static_cast<const std::byte*>(send);
  if (n == 1) {
    if (in != recv) std::memmove(recv, in, recv_count * esz);
    return;
  }
  const std::size_t block_bytes = recv_count * esz;
  std::byte* work = ctx.scratch(static_cast<std::size_t>(n) * block_bytes, 1);
  if ((n & (n - 1)) == 0 && static_cast<std::size_t>(n) * block_bytes <= detail::kRecursiveReduceScatterBytes) {
    std::byte* tmp = ctx.scratch(static_cast<std::size_t>(n / 2) * block_bytes);
    const std::byte* cur = in;  // partial results live in `work` after the first step
    int lo = 0;                 // current range of blocks: [lo, lo + 2 * mask)
    for (int mask = n / 2; mask >= 1; mask >>= 1) {
      const int partner = r ^ mask;
      const bool lower = (r & mask) == 0;
      const std::size_t keep = static_cast<std::size_t>(lower ? lo : lo + mask) * block_bytes;
      const std::size_t give = static_cast<std::size_t>(lower ? lo + mask : lo) * block_bytes;
      const std::size_t bytes = static_cast<std::size_t>(mask) * block_bytes;
      OpContext::Handle h[2] = {ctx.irecv(tmp, bytes, partner), ctx.isend(cur + give, bytes, partner)};
      ctx.wait_all(h, 2);
      reduce(work + keep, cur + keep, tmp, static_cast<std::size_t>(mask) * recv_count, dtype, op);
      cur = work;
      if (!lower) lo += mask;
    }
    std::memcpy(recv, work + static_cast<std::size_t>(r) * block_bytes, block_bytes);
    return;
  }
  std::vector<detail::Block> blocks(static_cast<std::size_t>(n));
  for (std::size_t b = 0; b < blocks.size(); ++b) blocks[b] = {b * recv_count, recv_count};
  detail::ring_reduce_scatter(ctx, in, work, blocks, dtype, op,
                              {detail::pick_segment_bytes(o.segment_bytes, detail::kRingSegmentBytes,
                                                          recv_count * esz, detail::kMaxRingSegments),
                               o.window > 0 ? o.window : detail::kWindow});
  std::memcpy(recv, work + static_cast<std::size_t>(r) * recv_count * esz, recv_count * esz);
}

}  // namespace

void reduce_scatter(Communicator& comm, const void* send, void* recv, std::size_t recv_count, DType dtype,
                    ReduceOp op, const CollectiveOptions& o) {
  const int n = comm.size(), rank = comm.rank();
  const std::size_t esz = dtype_size(dtype);
  if (!send) send = recv;
  detail::ShmSegment::Channel* ch = detail::blocking_channel(comm);
  OpContext ctx(comm, !ch ? "reduce_scatter" : ch->hosts() == 1 ? "shm_reduce_scatter" : "hierarchical_reduce_scatter",
                o.timeout_s, collective_key("reduce_scatter", recv_count, static_cast<int>(dtype), static_cast<int>(op)));
  if (recv_count == 0) return;
  const std::size_t in_bytes = static_cast<std::size_t>(n) * recv_count * esz;
  if (ch) {
    detail::with_host_buffers(send, in_bytes, recv, send == recv ? in_bytes : 0, recv_count * esz,
                              [&](const void* s, void* r) {
                                if (ch->hosts() == 1)
                                  detail::shm_reduce_scatter_run(ctx, *ch, s ? s : r, r, recv_count, dtype, op);
                                else
                                  detail::hierarchical_reduce_scatter_run(ctx, *ch, s ? s : r, r, recv_count, dtype, op);
                              });
    return;
  }
  detail::with_host_buffers(send, in_bytes, recv, send == recv ? in_bytes : 0, recv_count * esz,
                            [&](const void* s, void* r) { run(ctx, s ? s : r, r, n, rank, recv_count, dtype, op, o); });
}

}  // namespace ftcc::comm
