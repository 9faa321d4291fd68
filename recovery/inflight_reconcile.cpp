#include "ftcc/recovery/inflight_reconcile.hpp"

#include <algorithm>
#include <vector>

#include "ftcc/comm/collectives.hpp"

namespace ftcc::recovery {
namespace {

std::string seq_line(std::int64_t seq) { return "collective #" + std::to_string(seq); }

}  // namespace

ReconcileOutcome reconcile_inflight(comm::Communicator& c, const InflightView& mine) {
  ReconcileOutcome out;
  const int n = c.size();
  // 1. Every survivor's done and whether it can take part.
  const std::int64_t me[2] = {mine.done, mine.exact ? 0 : std::max(1, mine.why_not_code)};
  std::vector<std::int64_t> all(static_cast<std::size_t>(2 * n));
  comm::allgather(c, me, all.data(), 2, DType::i64);
  out.lo = out.hi = mine.done;
  int not_exact = -1;
  for (int r = 0; r < n; ++r) {
    out.lo = std::min(out.lo, all[2 * r]);
    out.hi = std::max(out.hi, all[2 * r]);
    if (all[2 * r + 1] != 0 && not_exact < 0) not_exact = r;
  }
  if (not_exact >= 0) {
    out.exact = false;
    const int code = static_cast<int>(all[2 * not_exact + 1]);
    out.why_not = mine.why_not_text ? mine.why_not_text(not_exact, code)
                                    : "rank " + std::to_string(not_exact) + " of the survivors cannot reconcile its operations";
    return out;
  }
  if (out.lo < out.hi)
    for (int r = 0; r < n && out.source < 0; ++r)
      if (all[2 * r] == out.hi) out.source = r;

  // 2. The source describes (lo, hi]: per sequence number, shareable and bytes (-1: not held).
  const std::int64_t span = out.hi - out.lo;
  std::vector<std::int64_t> desc(static_cast<std::size_t>(2 * span), -1);
  std::vector<HeldResult> held(static_cast<std::size_t>(span));
  if (span > 0) {
    if (c.rank() == out.source) {
      for (std::int64_t k = 0; k < span; ++k) {
        held[k] = mine.held ? mine.held(out.lo + 1 + k) : HeldResult{};
        desc[2 * k] = held[k].held ? (held[k].shareable ? 1 : 0) : -1;
        desc[2 * k + 1] = static_cast<std::int64_t>(held[k].bytes);
      }
    }
    comm::broadcast(c, desc.data(), desc.size(), DType::i64, out.source);
    for (std::int64_t k = 0; k < span && out.exact; ++k) {
      if (desc[2 * k] < 0) {
        out.exact = false;
        out.why_not = "the result of " + seq_line(out.lo + 1 + k) + " is no longer held";
      } else if (desc[2 * k] == 0) {
        out.exact = false;
        out.why_not = seq_line(out.lo + 1 + k) + " (completed on some survivors only) has a different result on each rank";
      }
    }
    if (!out.exact) return out;
  }

  // Each rank checks that its own calls in (done, hi] expect that many bytes (any mismatch: a
  // program that made different calls on different ranks), and whether a call it made past hi
  // cannot run again on the survivors; either stops every rank the same way.
  std::int64_t check[2] = {-1, -1};
  for (std::int64_t k = 0; k < span && check[0] < 0; ++k) {
    const std::int64_t seq = out.lo + 1 + k;
    if (seq <= mine.done) continue;
    const std::int64_t want = mine.expects ? mine.expects(seq) : -1;
    if (want >= 0 && want != desc[2 * k + 1]) check[0] = seq;
  }
  if (mine.cannot_redo) check[1] = mine.cannot_redo(out.hi);
  comm::allreduce(c, comm::kInPlace, check, 2, DType::i64, comm::ReduceOp::max);
  if (check[0] >= 0) {
    out.exact = false;
    out.why_not = "survivors disagree on " + seq_line(check[0]) +
                  " (a rank that did not complete it made another call): the calls differ between ranks";
    return out;
  }
  if (check[1] >= 0) {
    out.exact = false;
    out.why_not = seq_line(check[1]) + " completed nowhere and cannot run again on the survivors (its shape or its "
                  "root was the old group's)";
    return out;
  }
  if (span == 0) return out;

  // 3. The results themselves, in order.
  std::vector<std::byte> buf;
  for (std::int64_t k = 0; k < span; ++k) {
    const std::int64_t seq = out.lo + 1 + k;
    const auto bytes = static_cast<std::size_t>(desc[2 * k + 1]);
    buf.resize(bytes);
    if (c.rank() == out.source && bytes > 0) std::copy_n(static_cast<const std::byte*>(held[k].data), bytes, buf.data());
    if (bytes > 0) comm::broadcast(c, buf.data(), bytes, DType::u8, out.source);
    if (seq > mine.done) {
      if (mine.adopt) mine.adopt(seq, buf.data(), bytes);
      ++out.adopted;
    }
  }
  return out;
}

}  // namespace ftcc::recovery
