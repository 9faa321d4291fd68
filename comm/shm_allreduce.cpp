// shm_allreduce: the allreduce of ranks on one host, through a shared-memory segment
// (comm/shm_segment.hpp) instead of MPI point-to-point.
//
// Per round (at most one slot of data; larger inputs take several rounds, alternating between the
// two generations of slots):
//   1. every rank copies its piece of the input into its own slot and raises its `arrived` flag;
//   2. once every flag is up, rank r reduces slice r of the piece from every rank's slot, in rank
//      order 0, 1, ..., n-1, into the result slot, and raises its `reduced` flag;
//   3. once every `reduced` flag is up, every rank copies the whole result out.
// Memory traffic per rank: about 3 x the data plus 1/n (a ring over point-to-point moves about 5x
// through MPI's own shared-memory copies). Pieces of up to kWholeRoundBytes skip step 3: every rank
// reduces the whole piece itself, in the same order (one synchronisation instead of two).
// Each element is reduced once, or by every rank in the same order: every rank gets the same bits,
// and the same bits in every run (no order depends on timing).
//
// Why a generation can be reused: a rank writes generation g's slot in round s + 2 only after it
// saw every `arrived` flag of round s + 1, and a rank raises that flag only after it has finished
// with round s (it read the slots, and the result, of round s before starting round s + 1).
//
// Waits poll the flags with the deadline and back-off of every ftcc wait (OpContext::idle), and,
// every kLivenessEvery idle rounds, the channel's liveness receives: a dead peer or a revoked
// communicator ends the wait with ProcessFailed / Revoked, as in the point-to-point algorithms.
// The fault hook runs before each flag is raised (one "send" per flag). The receive hook (fault
// injection: corruption in transit; set on some ranks only) sees what this rank reads of each
// peer's slot, as if it had received it: its own slice in place (no other rank reads it), and in
// the one-synchronisation path, where every rank reads every slot whole, a private copy.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/reduce_kernels.hpp"
#include "ftcc/comm/shm_segment.hpp"

namespace ftcc::comm::detail {
namespace {

constexpr std::size_t kWholeRoundBytes = 32 * kKiB;
constexpr unsigned kLivenessEvery = 64;

using Flag = ShmSegment::Flag;
using Channel = ShmSegment::Channel;

void raise_flag(OpContext& ctx, Flag& f, std::uint64_t round) {
  ctx.before_send();
  f.value.store(round, std::memory_order_release);
}

// Until every rank's flag (arrived or reduced) reached `round`.
void wait_for_all(OpContext& ctx, Channel& ch, Flag& (Channel::*flag)(int) const, std::uint64_t round) {
  unsigned idle = 0;
  for (int p = 0; p < ch.size();) {
    if ((ch.*flag)(p).value.load(std::memory_order_acquire) >= round) {
      ++p;
      continue;
    }
    if (++idle % kLivenessEvery == 0) ch.check_peers(ctx.op());
    ctx.idle_waiting_for(p);
  }
  ctx.progressed();
}

// out = slot_0 op slot_1 op ... op slot_{n-1} over elements [lo, hi), in rank order. With a
// receive hook, the peers' parts pass through it first: in place when `in_place` (this rank alone
// reads them), else as copies in the context's scratch.
void reduce_slots(OpContext& ctx, const Channel& ch, int generation, void* out, std::size_t lo, std::size_t hi,
                  DType dtype, ReduceOp op, bool in_place) {
  if (hi <= lo) return;
  const std::size_t w = dtype_size(dtype), k = hi - lo;
  std::vector<const std::byte*> from(static_cast<std::size_t>(ch.size()));
  std::byte* copies = nullptr;
  const ReceiveHook* hook = ctx.receive_hook();
  if (hook != nullptr && !in_place) copies = ctx.scratch(static_cast<std::size_t>(ch.size()) * k * w, 1);
  for (int r = 0; r < ch.size(); ++r) {
    std::byte* at = ch.slot(generation, r) + lo * w;
    if (hook != nullptr && r != ch.rank()) {
      if (copies != nullptr) at = static_cast<std::byte*>(std::memcpy(copies + static_cast<std::size_t>(r) * k * w, at, k * w));
      (*hook)(ctx.op(), ctx.tag(), at, k * w);
    }
    from[static_cast<std::size_t>(r)] = at;
  }
  reduce(out, from[0], from[1], k, dtype, op);
  for (std::size_t r = 2; r < from.size(); ++r) reduce(out, out, from[r], k, dtype, op);
}

}  // namespace

void shm_allreduce_run(OpContext& ctx, Channel& ch, const void* send, void* recv, std::size_t count, DType dtype,
                       ReduceOp op) {
  const std::size_t w = dtype_size(dtype), n = static_cast<std::size_t>(ch.size());
  const std::size_t per_round = ch.slot_bytes() / w;
  // Slices start on 64-byte boundaries (the kernels' vector loads), so a slice is a multiple of this.
  const std::size_t grain = std::max<std::size_t>(1, 64 / w);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  for (std::size_t at = 0; at < count; at += per_round) {
    const std::size_t m = std::min(per_round, count - at);
    const std::uint64_t round = ch.next_round();
    const int g = static_cast<int>(round % ShmSegment::kGenerations);
    std::memcpy(ch.slot(g, ch.rank()), in + at * w, m * w);
    raise_flag(ctx, ch.arrived(ch.rank()), round);
    wait_for_all(ctx, ch, &Channel::arrived, round);
    if (m * w <= kWholeRoundBytes) {
      reduce_slots(ctx, ch, g, out + at * w, 0, m, dtype, op, false);
      continue;
    }
    const std::size_t slice = (m + n * grain - 1) / (n * grain) * grain;
    const std::size_t lo = std::min(m, static_cast<std::size_t>(ch.rank()) * slice), hi = std::min(m, lo + slice);
    std::byte* result = ch.slot(g, ch.size());
    reduce_slots(ctx, ch, g, result + lo * w, lo, hi, dtype, op, true);
    raise_flag(ctx, ch.reduced(ch.rank()), round);
    wait_for_all(ctx, ch, &Channel::reduced, round);
    std::memcpy(out + at * w, result, m * w);
  }
}

}  // namespace ftcc::comm::detail
