// hierarchical_allreduce: the allreduce of a communicator whose ranks run on several hosts, some
// of them with several ranks: shared memory inside each host, MPI point-to-point only between the
// hosts' leaders (each host's lowest rank; comm/shm_segment.hpp).
//
//   1. Reduce to the leader, per round (one slot of data): every rank of the host copies its piece
//      into its slot and raises `arrived`; once all are up, rank r of the host reduces slice r from
//      every slot, in host-rank order, into the result slot and raises `reduced`; the leader waits
//      for every `reduced` and copies the result into its output. Pieces of up to
//      kShmWholeRoundBytes: the leader reduces the whole piece itself, the others only copy in.
//      (Hosts of different sizes; this is shm_reduce_run, comm/shm_collectives.cpp.)
//   2. The leaders allreduce their outputs in place, over MPI point-to-point, with the algorithm
//      `auto` picks for that size and number of hosts (ring, tree or rhd), under this collective's
//      tag (a SubgroupTransport that keeps the communicator's tags: no other message can match).
//   3. Broadcast from the leader, per round: the leader copies a piece into the result slot and
//      raises its `reduced` flag; the others copy it out and raise `arrived` ("done with it").
// A host with one rank skips 1 and 3 (its leader is that rank).
//
// Generations: in 1, as in shm_allreduce (a rank writes a generation's slots again only after every
// rank raised `arrived` for the round in between, which each raises only once it is done with the
// round before). In 3 the leader writes generation g of round s only once every rank raised
// `arrived` for round s - 2 (done with the last round that used g); between 1 and 3 and from one
// call to the next the rounds keep counting, so the same argument holds across them.
//
// Sums: in host-rank order inside each host, then the leaders' algorithm's fixed order: every rank
// gets the same bits, and the same bits in every run, but not the bits of the flat algorithms (a
// different order of the same terms). --deterministic sums exactly and is unaffected.
//
// Failures: a rank that dies is seen by its host's ranks (the liveness receives) and by the
// leaders' exchange (ULFM); ranks of other hosts waiting in 3 are released by the revoke that
// follows the first error (the recovery layer revokes; so do the tests), as ranks far from a dead
// one are in a ring. A Timeout names ranks of the communicator.
#include <algorithm>
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/shm_steps.hpp"

namespace ftcc::comm::detail {
namespace {

using Channel = ShmSegment::Channel;

// Every host the same size: host rank r reduces slice r of every round (packed into the context's
// scratch slot 2), allreduces that with the ranks of place r on the other hosts, then writes it into the
// result slot for all to copy out.
void sliced(OpContext& ctx, Channel& ch, const std::byte* in, std::byte* out, std::size_t count, DType dtype,
            ReduceOp op, const AllreduceOptions& o) {
  const std::size_t w = dtype_size(dtype), per_round = ch.slot_bytes() / w;
  const int me = ch.rank(), local = ch.size();
  auto mine = [&](std::size_t m) {  // [lo, hi) of this rank's slice of a piece of m elements
    return std::pair{shm_slice_at(m, w, local, me), shm_slice_at(m, w, local, me + 1)};
  };
  std::size_t packed = 0;  // elements of this rank's slices, over all rounds
  for (std::size_t at = 0; at < count; at += per_round) {
    const auto [lo, hi] = mine(std::min(per_round, count - at));
    packed += hi - lo;
  }
  std::byte* part = ctx.scratch(packed * w, 2);  // poisoned with the rest if a receive outlives the call

  // 1. Reduce-scatter inside the host.
  std::size_t p = 0;
  for (std::size_t at = 0; at < count; at += per_round) {
    const std::size_t m = std::min(per_round, count - at);
    const std::uint64_t round = shm_open_round(ctx, ch, in + at * w, m * w);
    const int g = shm_generation(round);
    const auto [lo, hi] = mine(m);
    shm_reduce_slots(ctx, ch, g, part + p * w, lo, hi, dtype, op, true);
    p += hi - lo;
  }

  // 2. Across the hosts, in place, my column.
  {
    OpContext across(ctx, *ch.across(), ch.across_ranks());
    const AllreduceAlgo algo = resolve_allreduce_algo(AllreduceAlgo::automatic, packed * w, ch.across()->size());
    allreduce_run(across, algo, part, part, packed, dtype, op, o);
  }

  // 3. Allgather inside the host.
  p = 0;
  for (std::size_t at = 0; at < count; at += per_round) {
    const std::size_t m = std::min(per_round, count - at);
    const std::uint64_t round = ch.next_round();
    const int g = shm_generation(round);
    std::byte* result = ch.slot(g, local);
    const auto [lo, hi] = mine(m);
    shm_wait_for_all(ctx, ch, false, round - 2);  // everyone has copied out the last use of g
    shm_store(result + lo * w, part + p * w, (hi - lo) * w);
    p += hi - lo;
    shm_raise(ctx, ch.reduced(me), round);
    shm_wait_for_all(ctx, ch, true, round);
    std::memcpy(out + at * w, result, m * w);
    if (const ReceiveHook* hook = ctx.receive_hook()) {  // the other ranks' slices, as if received
      if (lo > 0) (*hook)(ctx.op(), ctx.tag(), out + at * w, lo * w);
      if (hi < m) (*hook)(ctx.op(), ctx.tag(), out + (at + hi) * w, (m - hi) * w);
    }
    shm_raise(ctx, ch.arrived(me), round);
  }
}

// Hosts of different sizes: the leaders gather, exchange and scatter.
void led(OpContext& ctx, Channel& ch, const std::byte* in, std::byte* out, std::size_t count, DType dtype, ReduceOp op,
         const AllreduceOptions& o) {
  const std::size_t w = dtype_size(dtype);
  const bool leader = ch.rank() == 0, alone = ch.size() == 1;
  const std::size_t per_round = alone ? count : ch.slot_bytes() / w;

  // 1. Reduce to the leader (shared memory's reduce: comm/shm_collectives.cpp).
  if (alone) {
    if (in != out) std::memcpy(out, in, count * w);
  } else {
    shm_reduce_run(ctx, ch, in, leader ? out : nullptr, count, dtype, op, 0);
  }

  // 2. Across the hosts.
  if (Transport* across = ch.across()) {
    OpContext part(ctx, *across, ch.across_ranks());
    const AllreduceAlgo algo = resolve_allreduce_algo(AllreduceAlgo::automatic, count * w, across->size());
    allreduce_run(part, algo, out, out, count, dtype, op, o);
  }

  // 3. Broadcast inside the host.
  if (alone) return;
  for (std::size_t at = 0; at < count; at += per_round) {
    const std::size_t m = std::min(per_round, count - at);
    const std::uint64_t round = ch.next_round();
    const int g = shm_generation(round);
    std::byte* result = ch.slot(g, ch.size());
    if (leader) {
      shm_wait_for_all(ctx, ch, false, round - 2);
      shm_store(result, out + at * w, m * w);
      shm_raise(ctx, ch.reduced(0), round);
      shm_raise(ctx, ch.arrived(0), round);
    } else {
      shm_wait_for(ctx, ch, true, 0, round);
      std::memcpy(out + at * w, result, m * w);
      if (const ReceiveHook* hook = ctx.receive_hook()) (*hook)(ctx.op(), ctx.tag(), out + at * w, m * w);
      shm_raise(ctx, ch.arrived(ch.rank()), round);
    }
  }
}

}  // namespace

void hierarchical_allreduce_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv,
                                std::size_t count, DType dtype, ReduceOp op, const AllreduceOptions& o) {
  // (Checked inside this host, by the first round there: the hosts' exchange is point-to-point.)
  const ShmSegment::CallDesc desc = shm_reduction_call(ShmKind::allreduce, count, dtype, op);
  const ShmCall call(ctx, ch, &desc);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (ch.sliced())
    sliced(ctx, ch, in, out, count, dtype, op, o);
  else
    led(ctx, ch, in, out, count, dtype, op, o);
}

}  // namespace ftcc::comm::detail
