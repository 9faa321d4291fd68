// comm/shm_steps.hpp: the steps the shared-memory collectives are built from (internal to comm/:
// comm/shm_allreduce.cpp, shm_collectives.cpp, hierarchical_allreduce.cpp and
// hierarchical_collectives.cpp).
//
// A "round" is one slot's worth of a collective: Channel::next_round() numbers it the same on every
// rank of the host, and a rank raises a flag to the round's number (flags only grow). Every wait
// polls with the deadline and back-off of every ftcc wait (OpContext::idle) and, every few idle
// rounds, the channel's liveness receives, so a dead peer or a revoked communicator ends it with
// ProcessFailed / Revoked; a Timeout names the communicator's rank of the peer waited for.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ftcc/comm/op_context.hpp"
#include "ftcc/comm/shm_segment.hpp"
#include "ftcc/comm/types.hpp"

namespace ftcc::comm::detail {

// The collectives a call descriptor names (ShmSegment::CallDesc::kind).
enum class ShmKind : std::int8_t { allreduce = 1, broadcast, reduce, allgather, gather, scatter, alltoallv, reduce_scatter, barrier };

// A reduction's descriptor (count in elements) and the others' (count in bytes; root a host rank).
ShmSegment::CallDesc shm_reduction_call(ShmKind kind, std::size_t count, DType dtype, ReduceOp op, int root = -1);
ShmSegment::CallDesc shm_bytes_call(ShmKind kind, std::size_t bytes, int root = -1);

// One collective on a channel: refuses a channel that an earlier collective left by an exception
// (CommError: its ranks may be at different rounds, and a flag left from the failed call would
// let a rank read a slot that no longer holds what it expects; revoke and shrink the communicator,
// or make a new one, as after any failed collective), and marks the channel so when this one
// leaves by an exception.
//
// Mismatch detection: with a descriptor (what this rank is calling), the collective's first
// round writes it into the channel before raising this rank's first flag. Where that round waits
// for every rank's `arrived` (every collective but broadcast and scatter), every rank then
// compares every rank's: a difference throws CollectiveMismatch on every rank, at that round,
// with the same message (every rank read the same descriptors), and leaves the channel usable.
// Broadcast and scatter, whose root waits for nobody (a wait would cost their small-message time
// a synchronisation): a non-root compares the root's descriptor with its own once the root's
// flag of the round is up, and a root takes the round's claim (a second root finds it taken); the
// ranks that find a difference throw CollectiveMismatch (each naming what it compared), the
// others may return normally, and the channel of a rank that threw is refused later (ShmCall).
// No rank reads data another call wrote. Nested calls (the hierarchical collectives running a
// shared-memory one inside the host) check the outermost descriptor given. Not checked here: a
// call that moves no data (it has no round; the next call's round finds the ranks apart) and a
// mismatch between hosts (their exchange is MPI point-to-point, whose tags carry the call's key:
// comm/communicator.hpp).
class ShmCall {
 public:
  ShmCall(const OpContext& ctx, ShmSegment::Channel& ch, const ShmSegment::CallDesc* desc = nullptr);
  ~ShmCall();
  ShmCall(const ShmCall&) = delete;
  ShmCall& operator=(const ShmCall&) = delete;
  // From here on an exception is thrown on every rank at the same round (an error every rank
  // finds in what all of them read): it leaves the channel usable.
  void in_step() { in_step_ = true; }

 private:
  ShmSegment::Channel& ch_;
  int uncaught_;
  bool in_step_ = false;
  bool set_pending_ = false;
};

// The first round of a call with a descriptor: shm_announce writes it (before this rank's
// `arrived` flag of `round` goes up), shm_verify compares every rank's (after every rank's flag of
// `round` was seen) and throws CollectiveMismatch. Both do nothing when no descriptor is pending.
void shm_announce(ShmSegment::Channel& ch, std::uint64_t round);
void shm_verify(OpContext& ctx, ShmSegment::Channel& ch, std::uint64_t round);
// Broadcast and scatter, first round. The root: announces and takes the round's claim (throws
// CollectiveMismatch if another rank took it). A non-root: announces, raises `arrived`, waits
// until the root's `reduced` (or, if the root is in another collective, `arrived`) flag reached
// `round`, and compares the root's descriptor with its own (throws CollectiveMismatch). With no
// descriptor pending, the non-root only raises `arrived` and waits for the root's `reduced`.
void shm_root_first_round(OpContext& ctx, ShmSegment::Channel& ch, std::uint64_t round);
void shm_nonroot_first_round(OpContext& ctx, ShmSegment::Channel& ch, std::uint64_t round, int root);

// Pieces of up to this many bytes are reduced whole by the rank(s) that need the result (one
// synchronisation instead of two).
inline constexpr std::size_t kShmWholeRoundBytes = 32 * 1024;

// The generation of slots a round uses.
inline int shm_generation(std::uint64_t round) { return static_cast<int>(round % ShmSegment::kGenerations); }
// Opens the channel's next round: once every rank is done with the round before last (every
// `arrived` >= round - 1: a rank raises it to s once it is done with s - 1), copies `bytes` of this
// rank's input into its slot of the round's generation, raises its `arrived` flag and waits for
// every rank's. Returns the round.
std::uint64_t shm_open_round(OpContext& ctx, ShmSegment::Channel& ch, const std::byte* piece, std::size_t bytes);

// Copies `bytes` into shared memory that other ranks read next (a slot). From kShmStreamBytes on,
// with non-temporal stores (x86): a store to a line that another core holds (it read the slot in
// the round before) must first take the line from that core, which on the development VM made a
// 1 MiB copy into a slot take up to 15 times a private one, depending on where the VM's vCPUs
// were placed; streaming stores write whole lines without reading them (measured with ftcc-bench,
// docs/collectives.md "Streaming stores into the slots"). Ends with a store fence, so the flag
// raised after it publishes the data. FTCC_SHM_STREAM=0: plain copies (to measure the difference).
void shm_store(void* dst, const void* src, std::size_t bytes);
inline constexpr std::size_t kShmStreamBytes = 16 * 1024;

// Raises `flag` to `round`, after the fault hook (one "send" per flag raised).
void shm_raise(OpContext& ctx, ShmSegment::Flag& flag, std::uint64_t round);
// Until host rank p's `arrived` (or `reduced`) flag reached `round`.
void shm_wait_for(OpContext& ctx, ShmSegment::Channel& ch, bool reduced, int p, std::uint64_t round);
// Until every host rank's flag reached `round`.
void shm_wait_for_all(OpContext& ctx, ShmSegment::Channel& ch, bool reduced, std::uint64_t round);

// shm_open_round with `fill(slot)` writing this rank's slot of the round's generation (alltoallv
// writes a piece for each peer).
template <class Fill>
std::uint64_t shm_open_round_with(OpContext& ctx, ShmSegment::Channel& ch, Fill&& fill) {
  const std::uint64_t round = ch.next_round();
  // Every rank done with round - 2, the last to use this generation (usually known already: the
  // round before waited for it; not after a broadcast, whose other ranks wait for the root alone).
  shm_wait_for_all(ctx, ch, false, round - 1);
  fill(ch.slot(shm_generation(round), ch.rank()));
  shm_announce(ch, round);
  shm_raise(ctx, ch.arrived(ch.rank()), round);
  shm_wait_for_all(ctx, ch, false, round);
  shm_verify(ctx, ch, round);
  return round;
}

// out = slot_0 op slot_1 op ... op slot_{n-1} over elements [lo, hi) of generation g, in rank order
// (the same bits on every rank and in every run). With a receive hook (fault injection: corruption
// in transit, set on some ranks only), the other ranks' parts pass through it first, as if this
// rank had received them: in place when `in_place` (this rank alone reads them), else as private
// copies in the context's scratch.
void shm_reduce_slots(OpContext& ctx, const ShmSegment::Channel& ch, int generation, void* out, std::size_t lo,
                      std::size_t hi, DType dtype, ReduceOp op, bool in_place);

// The first element of host rank r's slice of a piece of m elements (slices start on 64-byte
// boundaries, for the kernels' vector loads); slice r is [shm_slice_at(r), shm_slice_at(r + 1)).
std::size_t shm_slice_at(std::size_t m, std::size_t elem_bytes, int ranks, int r);

}  // namespace ftcc::comm::detail
