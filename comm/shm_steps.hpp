// comm/shm_steps.hpp: the steps the shared-memory collectives are built from (internal to comm/:
// comm/shm_allreduce.cpp and comm/hierarchical_allreduce.cpp).
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

// One collective on a channel: refuses a channel that an earlier collective left by an exception
// (CommError: its ranks may be at different rounds, and a flag left from the failed call would
// let a rank read a slot that no longer holds what it expects; revoke and shrink the communicator,
// or make a new one, as after any failed collective), and marks the channel so when this one
// leaves by an exception.
class ShmCall {
 public:
  ShmCall(const OpContext& ctx, ShmSegment::Channel& ch);
  ~ShmCall();
  ShmCall(const ShmCall&) = delete;
  ShmCall& operator=(const ShmCall&) = delete;

 private:
  ShmSegment::Channel& ch_;
  int uncaught_;
};

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

// Raises `flag` to `round`, after the fault hook (one "send" per flag raised).
void shm_raise(OpContext& ctx, ShmSegment::Flag& flag, std::uint64_t round);
// Until host rank p's `arrived` (or `reduced`) flag reached `round`.
void shm_wait_for(OpContext& ctx, ShmSegment::Channel& ch, bool reduced, int p, std::uint64_t round);
// Until every host rank's flag reached `round`.
void shm_wait_for_all(OpContext& ctx, ShmSegment::Channel& ch, bool reduced, std::uint64_t round);

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
