// allgather. Small totals on 2^k ranks: recursive doubling, log2 n exchanges (step k swaps the
// 2^k blocks gathered so far with rank r xor 2^k). Otherwise the ring allgather phase: n-1 steps,
// each block forwarded as it arrives (bandwidth-optimal for any n). Ranks that all run on one host:
// through shared memory (shm_collectives.cpp); on several hosts, some with several ranks:
// hierarchical (hierarchical_collectives.cpp).
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/ring_phases.hpp"

namespace ftcc::comm {
namespace {

void recursive_doubling(OpContext& ctx, std::byte* buf, std::size_t block_bytes) {
  const int n = ctx.size(), r = ctx.rank();
  for (int mask = 1; mask < n; mask <<= 1) {
    const int partner = r ^ mask;
    const std::size_t mine = static_cast<std::size_t>(r & ~(mask - 1)) * block_bytes;
    const std::size_t theirs = static_cast<std::size_t>(partner & ~(mask - 1)) * block_bytes;
    const std::size_t bytes = static_cast<std::size_t>(mask) * block_bytes;
    OpContext::Handle h[2] = {ctx.irecv(buf + theirs, bytes, partner), ctx.isend(buf + mine, bytes, partner)};
    ctx.wait_all(h, 2);
  }
}

}  // namespace

void allgather(Communicator& comm, const void* send, void* recv, std::size_t send_count, DType dtype,
               const CollectiveOptions& o) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t esz = dtype_size(dtype);
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + static_cast<std::size_t>(r) * send_count * esz;
  detail::ShmSegment::Channel* ch = detail::blocking_channel(comm);
  OpContext ctx(comm, !ch ? "allgather" : ch->hosts() == 1 ? "shm_allgather" : "hierarchical_allgather", o.timeout_s,
                collective_key("allgather", send_count * esz));
  if (send_count == 0) return;
  const std::size_t total = static_cast<std::size_t>(n) * send_count * esz;
  const bool in_place = !send || send == mine;
  if (ch) {
    detail::with_host_buffers(in_place ? nullptr : send, send_count * esz, recv, in_place ? total : 0, total,
                              [&](const void* s, void* rv) {
                                const auto* from = s ? s : static_cast<std::byte*>(rv) + static_cast<std::size_t>(r) * send_count * esz;
                                if (ch->hosts() == 1)
                                  detail::shm_allgather_run(ctx, *ch, from, rv, send_count * esz);
                                else
                                  detail::hierarchical_allgather_run(ctx, *ch, from, rv, send_count * esz);
                              });
    return;
  }
  detail::with_host_buffers(in_place ? nullptr : send, send_count * esz, recv, in_place ? total : 0, total,
                            [&](const void* s, void* rv) {
                              auto* base = static_cast<std::byte*>(rv);
                              std::byte* my_block = base + static_cast<std::size_t>(r) * send_count * esz;
                              if (s && s != my_block) std::memcpy(my_block, s, send_count * esz);
                              if ((n & (n - 1)) == 0 && total <= detail::kRecursiveAllgatherBytes) {
                                recursive_doubling(ctx, base, send_count * esz);
                                return;
                              }
                              std::vector<detail::Block> blocks(static_cast<std::size_t>(n));
                              for (std::size_t b = 0; b < blocks.size(); ++b) blocks[b] = {b * send_count, send_count};
                              detail::ring_allgather(ctx, rv, blocks, dtype,
                                                     {detail::pick_segment_bytes(o.segment_bytes, detail::kRingSegmentBytes,
                                                                                 send_count * esz, detail::kMaxRingSegments),
                                                      o.window > 0 ? o.window : detail::kWindow});
                            });
}

}  // namespace ftcc::comm
