#include "ftcc/comm/ring_phases.hpp"

#include <algorithm>

#include "ftcc/comm/reduce_kernels.hpp"

namespace ftcc::comm::detail {
namespace {

// One engine for both phases; `reducing` selects reduce-scatter (receive into a scratch slot,
// then combine) or allgather (receive in place).
void ring_pass(OpContext& ctx, const std::byte* src, std::byte* work, const std::vector<Block>& blocks, DType dtype,
               ReduceOp op, bool reducing, const RingParams& p) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1) return;
  const std::size_t esz = dtype_size(dtype);
  std::size_t max_block = 0;
  for (const Block& b : blocks) max_block = std::max(max_block, b.count);
  if (max_block == 0) return;  // nothing to move (every rank knows the same counts)

  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const std::size_t m = segments_for(max_block, esz, p.segment_bytes);
  const std::size_t W = static_cast<std::size_t>(std::max(1, p.window));
  const std::size_t T = static_cast<std::size_t>(n - 1) * m;  // messages each way
  const std::size_t seg_cap = (max_block + m - 1) / m;        // elements in the largest segment
  std::byte* tmp = reducing ? ctx.scratch(W * seg_cap * esz) : nullptr;

  // Message t is segment j = t % m of step s = t / m.
  auto send_block = [&](std::size_t s) { return reducing ? mod(r - static_cast<int>(s) - 1, n) : mod(r - static_cast<int>(s), n); };
  auto recv_block = [&](std::size_t s) { return reducing ? mod(r - static_cast<int>(s) - 2, n) : mod(r - static_cast<int>(s) - 1, n); };
  auto segment = [&](int b, std::size_t j) {
    const Block& blk = blocks[static_cast<std::size_t>(b)];
    Block part = balanced_part(blk.count, m, j);
    part.offset += blk.offset;
    return part;
  };

  std::vector<OpContext::Handle> rh(W), sh(W);
  std::size_t posted = 0, received = 0, sent = 0, send_done = 0;
  while (received < T || send_done < T) {
    bool progress = false;
    // Receives run up to W ahead of what has been consumed.
    while (posted < T && posted - received < W) {
      const Block seg = segment(recv_block(posted / m), posted % m);
      void* dst = reducing ? static_cast<void*>(tmp + (posted % W) * seg_cap * esz) : work + seg.offset * esz;
      rh[posted % W] = ctx.irecv(dst, seg.count * esz, left);
      ++posted;
      progress = true;
    }
    // Message t of step s >= 1 forwards what message t - m brought in.
    while (sent < T && sent - send_done < W && (sent < m || received > sent - m)) {
      const std::size_t s = sent / m;
      const Block seg = segment(send_block(s), sent % m);
      const std::byte* from = (reducing && s == 0) ? src : work;
      sh[sent % W] = ctx.isend(from + seg.offset * esz, seg.count * esz, right);
      ++sent;
      progress = true;
    }
    // Segments from the left arrive in order.
    while (received < posted && ctx.test(rh[received % W])) {
      if (reducing) {
        const Block seg = segment(recv_block(received / m), received % m);
        reduce(work + seg.offset * esz, src + seg.offset * esz, tmp + (received % W) * seg_cap * esz, seg.count,
               dtype, op);
      }
      ++received;
      progress = true;
    }
    while (send_done < sent && ctx.test(sh[send_done % W])) {
      ++send_done;
      progress = true;
    }
    if (progress)
      ctx.progressed();
    else
      ctx.idle();
  }
}

}  // namespace

void ring_reduce_scatter(OpContext& ctx, const void* src, void* work, const std::vector<Block>& blocks,
                         DType dtype, ReduceOp op, const RingParams& p) {
  ring_pass(ctx, static_cast<const std::byte*>(src), static_cast<std::byte*>(work), blocks, dtype, op, true, p);
}

void ring_allgather(OpContext& ctx, void* buf, const std::vector<Block>& blocks, DType dtype, const RingParams& p) {
  ring_pass(ctx, nullptr, static_cast<std::byte*>(buf), blocks, dtype, ReduceOp::sum, false, p);
}

}  // namespace ftcc::comm::detail
