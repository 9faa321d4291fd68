// Recursive halving-doubling allreduce (Rabenseifner), for power-of-two and other rank counts.
//
//   fold      with n = 2^k + rem, ranks 0..2rem-1 pair up: each even rank hands its vector to the
//             odd rank above it and sits out; 2^k ranks remain, renumbered 0..2^k-1
//   halving   k steps: exchange half of the current range with the partner at distance
//             2^k/2, 2^k/4, ..., 1 and reduce the half kept: a reduce-scatter in log2 steps
//   doubling  k steps in reverse: exchange the reduced ranges back: an allgather
//   unfold    odd ranks hand the result to the even rank that sat out
// Small vectors (or fewer elements than ranks) skip the halving: recursive doubling exchanges
// the whole vector k times, which is the fewest message latencies.
// Each pairwise step computes mine op partner's on one side and partner's op mine on the other,
// which IEEE arithmetic makes bitwise equal, so every rank ends with the same bits.
#include <cstring>
#include <vector>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/reduce_kernels.hpp"

namespace ftcc::comm {
namespace detail {

void rhd_allreduce_run(OpContext& ctx, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  const std::size_t esz = dtype_size(dtype), bytes = count * esz;
  const auto* src = static_cast<const std::byte*>(send);
  auto* work = static_cast<std::byte*>(recv);
  if (count == 0) return;
  if (n == 1) {
    if (src != work) std::memcpy(work, src, bytes);
    return;
  }
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int rem = n - pof2;
  const bool whole = bytes <= kRecursiveDoublingBytes || count < static_cast<std::size_t>(pof2);
  std::byte* tmp = ctx.scratch(whole || r < 2 * rem ? bytes : (count + 1) / 2 * esz);
  auto exchange = [&](const void* out, std::size_t out_bytes, void* in, std::size_t in_bytes, int peer) {
    OpContext::Handle h[2] = {ctx.irecv(in, in_bytes, peer), ctx.isend(out, out_bytes, peer)};
    ctx.wait_all(h, 2);
  };

  // Fold.
  const std::byte* cur = src;  // where this rank's current partial result lives
  int nr = -1;                 // rank among the 2^k participants
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      ctx.wait(ctx.isend(src, bytes, r + 1));
    } else {
      ctx.wait(ctx.irecv(tmp, bytes, r - 1));
      reduce(work, src, tmp, count, dtype, op);
      cur = work;
      nr = r / 2;
    }
  } else {
    nr = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };

  if (nr >= 0 && whole) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      exchange(cur, bytes, tmp, bytes, real(nr ^ mask));
      reduce(work, cur, tmp, count, dtype, op);
      cur = work;
    }
  } else if (nr >= 0) {
    // Halving: both partners hold the same [lo, hi) at each step (they made the same choices at
    // the larger distances), so they split it at the same point.
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    std::size_t lo = 0, hi = count;
    for (int mask = pof2 / 2; mask >= 1; mask >>= 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      const bool lower = (nr & mask) == 0;
      const std::size_t klo = lower ? lo : mid, khi = lower ? mid : hi;  // kept
      const std::size_t slo = lower ? mid : lo, shi = lower ? hi : mid;  // given away
      exchange(cur + slo * esz, (shi - slo) * esz, tmp, (khi - klo) * esz, real(nr ^ mask));
      reduce(work + klo * esz, cur + klo * esz, tmp, khi - klo, dtype, op);
      cur = work;
      ranges.emplace_back(lo, hi);
      lo = klo;
      hi = khi;
    }
    // Doubling: undo the splits, last first; the partner holds the other half of the range.
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const auto [plo, phi] = ranges.back();
      ranges.pop_back();
      const bool lower = (nr & mask) == 0;  // the half this rank kept at this distance
      const std::size_t olo = lower ? hi : plo, ohi = lower ? phi : lo;
      exchange(work + lo * esz, (hi - lo) * esz, work + olo * esz, (ohi - olo) * esz, real(nr ^ mask));
      lo = plo;
      hi = phi;
    }
  }

  // Unfold.
  if (r < 2 * rem) {
    if (r % 2 == 1)
      ctx.wait(ctx.isend(work, bytes, r - 1));
    else
      ctx.wait(ctx.irecv(work, bytes, r + 1));
  }
}

}  // namespace detail

void rhd_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                   const CollectiveOptions& o) {
  OpContext ctx(comm, "rhd_allreduce", o.timeout_s, collective_key("allreduce", count, static_cast<int>(dtype), static_cast<int>(op)));
  const std::size_t bytes = count * dtype_size(dtype);
  detail::with_host_buffers(send, bytes, recv, send && send != recv ? 0 : bytes, bytes, [&](const void* s, void* r) {
    detail::rhd_allreduce_run(ctx, s ? s : r, r, count, dtype, op);
  });
}

}  // namespace ftcc::comm
