// shm_collectives: broadcast, allgather, reduce_scatter and barrier for the ranks of one host,
// through the communicator's shared-memory segment (comm/shm_segment.hpp; the allreduce is
// comm/shm_allreduce.cpp). They share channel 0 with the blocking allreduce and its rounds.
//
// What `arrived` means, for every collective on a channel: a rank raises it to round s when it has
// finished round s - 1 and (where it has one) written its piece of round s into its slot. So
// "every `arrived` >= s - 1" means every rank is done with round s - 2, whose generation of slots
// round s reuses: that is what a writer of a shared slot waits for (the result slot in broadcast),
// and what the waits of the other collectives give for free (allgather and reduce_scatter write
// only their own slot, after every rank's `arrived` of the round before).
//
//   broadcast       per round: the root waits until every rank is done with the round before the
//                   last, copies its piece into the result slot and raises `reduced`; the others
//                   raise `arrived`, wait for the root's `reduced` and copy the piece out.
//   allgather       per round: every rank copies its piece into its slot and raises `arrived`;
//                   once all are up, each copies every rank's piece to its place.
//   reduce_scatter  per round of the whole input (n blocks): every rank copies its piece in; once
//                   all are up, each reduces the part of its own block that falls in the round,
//                   in rank order, straight into its output.
//   barrier         one round: raise `arrived`, wait for every rank's.
// Failures, deadlines and the hooks are those of the shared-memory allreduce (comm/shm_steps.hpp;
// a collective that fails leaves the channel refused to later ones, ShmCall):
// the fault hook runs before each flag is raised, the receive hook sees what a rank reads of the
// others' slots (its own copies, or its block of their slots, which no one else reads).
#include <algorithm>
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/shm_steps.hpp"

namespace ftcc::comm::detail {

void shm_broadcast_run(OpContext& ctx, ShmSegment::Channel& ch, void* buf, std::size_t bytes, int root) {
  const ShmCall call(ctx, ch);
  auto* b = static_cast<std::byte*>(buf);
  const std::size_t per_round = ch.slot_bytes();
  const int me = ch.rank();
  for (std::size_t at = 0; at < bytes; at += per_round) {
    const std::size_t m = std::min(per_round, bytes - at);
    const std::uint64_t round = ch.next_round();
    std::byte* result = ch.slot(shm_generation(round), ch.size());
    if (me == root) {
      shm_wait_for_all(ctx, ch, false, round - 1);
      std::memcpy(result, b + at, m);
      shm_raise(ctx, ch.reduced(me), round);
      shm_raise(ctx, ch.arrived(me), round);
    } else {
      shm_raise(ctx, ch.arrived(me), round);
      shm_wait_for(ctx, ch, true, root, round);
      std::memcpy(b + at, result, m);
      if (const ReceiveHook* hook = ctx.receive_hook()) (*hook)(ctx.op(), ctx.tag(), b + at, m);
    }
  }
}

void shm_allgather_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv, std::size_t block_bytes) {
  const ShmCall call(ctx, ch);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t per_round = ch.slot_bytes();
  for (std::size_t at = 0; at < block_bytes; at += per_round) {
    const std::size_t m = std::min(per_round, block_bytes - at);
    const int g = shm_generation(shm_open_round(ctx, ch, in + at, m));
    for (int r = 0; r < ch.size(); ++r) {
      std::byte* to = out + static_cast<std::size_t>(r) * block_bytes + at;
      if (to == in + at) continue;  // in place: this rank's own block is there already
      std::memcpy(to, ch.slot(g, r), m);
      if (const ReceiveHook* hook = ctx.receive_hook(); hook != nullptr && r != ch.rank())
        (*hook)(ctx.op(), ctx.tag(), to, m);
    }
  }
}

void shm_reduce_scatter_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv,
                            std::size_t recv_count, DType dtype, ReduceOp op) {
  const ShmCall call(ctx, ch);
  const std::size_t w = dtype_size(dtype), total = static_cast<std::size_t>(ch.size()) * recv_count;
  const std::size_t per_round = ch.slot_bytes() / w;
  const std::size_t mine_lo = static_cast<std::size_t>(ch.rank()) * recv_count, mine_hi = mine_lo + recv_count;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  // In place (send == recv): block r's result lands at the front, below any input still to be copied in.
  for (std::size_t at = 0; at < total; at += per_round) {
    const std::size_t m = std::min(per_round, total - at);
    const int g = shm_generation(shm_open_round(ctx, ch, in + at * w, m * w));
    const std::size_t lo = std::max(at, mine_lo), hi = std::min(at + m, mine_hi);
    if (lo < hi) shm_reduce_slots(ctx, ch, g, out + (lo - mine_lo) * w, lo - at, hi - at, dtype, op, true);
  }
}

void shm_barrier_run(OpContext& ctx, ShmSegment::Channel& ch) {
  const ShmCall call(ctx, ch);
  const std::uint64_t round = ch.next_round();
  shm_raise(ctx, ch.arrived(ch.rank()), round);
  shm_wait_for_all(ctx, ch, false, round);
}

ShmSegment::Channel* one_host_channel(Communicator& comm) {
  ShmSegment* s = comm.shared_memory();
  return s != nullptr && s->hosts() == 1 ? &s->channel(0) : nullptr;
}

}  // namespace ftcc::comm::detail
