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
// through MPI's own shared-memory copies). Pieces of up to kShmWholeRoundBytes skip step 3: every rank
// reduces the whole piece itself, in the same order (one synchronisation instead of two).
// Each element is reduced once, or by every rank in the same order: every rank gets the same bits,
// and the same bits in every run (no order depends on timing).
//
// Why a generation can be reused: a rank writes generation g's slot in round s + 2 only after it
// saw every `arrived` flag of round s + 1, and a rank raises that flag only after it has finished
// with round s (it read the slots, and the result, of round s before starting round s + 1).
//
// Waits (comm/shm_steps.hpp) poll the flags with the deadline and back-off of every ftcc wait, and
// the channel's liveness receives: a dead peer or a revoked
// communicator ends the wait with ProcessFailed / Revoked, as in the point-to-point algorithms.
// The fault hook runs before each flag is raised (one "send" per flag). The receive hook (fault
// injection: corruption in transit; set on some ranks only) sees what this rank reads of each
// peer's slot, as if it had received it: its own slice in place (no other rank reads it), and in
// the one-synchronisation path, where every rank reads every slot whole, a private copy.
#include <algorithm>
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/shm_steps.hpp"

namespace ftcc::comm::detail {

void shm_allreduce_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv, std::size_t count,
                       DType dtype, ReduceOp op) {
  const ShmSegment::CallDesc desc = shm_reduction_call(ShmKind::allreduce, count, dtype, op);
  const ShmCall call(ctx, ch, &desc);
  const std::size_t w = dtype_size(dtype);
  const std::size_t per_round = ch.slot_bytes() / w;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  for (std::size_t at = 0; at < count; at += per_round) {
    const std::size_t m = std::min(per_round, count - at);
    const std::uint64_t round = shm_open_round(ctx, ch, in + at * w, m * w);
    const int g = shm_generation(round);
    if (m * w <= kShmWholeRoundBytes) {
      shm_reduce_slots(ctx, ch, g, out + at * w, 0, m, dtype, op, false);
      continue;
    }
    const std::size_t lo = shm_slice_at(m, w, ch.size(), ch.rank()), hi = shm_slice_at(m, w, ch.size(), ch.rank() + 1);
    std::byte* result = ch.slot(g, ch.size());
    shm_reduce_slots(ctx, ch, g, result + lo * w, lo, hi, dtype, op, true);
    shm_raise(ctx, ch.reduced(ch.rank()), round);
    shm_wait_for_all(ctx, ch, true, round);
    std::memcpy(out + at * w, result, m * w);
  }
}

}  // namespace ftcc::comm::detail
