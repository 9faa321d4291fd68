// shm_collectives: broadcast, reduce, allgather, gather, scatter, reduce_scatter, alltoallv and
// barrier for the ranks of one host, through the communicator's shared-memory segment
// (comm/shm_segment.hpp; the allreduce is comm/shm_allreduce.cpp). They share channel 0 with the
// blocking allreduce and its rounds. `root` is a host rank. The hierarchical collectives
// (comm/hierarchical_collectives.cpp) run them inside each host.
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
//   reduce          per round, as the allreduce (comm/shm_allreduce.cpp), but only the root copies
//                   the result out (pieces of up to kShmWholeRoundBytes: only the root reduces).
//   allgather       per round: every rank copies its piece into its slot and raises `arrived`;
//                   once all are up, each copies every rank's piece to its place.
//   gather          the same, but only the root copies the pieces out.
//   scatter         per round: the root waits as the broadcast's does, copies block r's piece into
//                   rank r's slot for every r and raises `reduced`; rank r copies its slot out.
//   alltoallv       one round: every rank writes its counts, sent and expected, into its slot (so
//                   every rank knows every rank's, and checks them all), and its data for rank p
//                   into part p (slot / n bytes) when it sends the others at most kShmAlltoallBytes
//                   in all, each message within its part; once all are up, if every rank's data
//                   was there, each copies part `me` of every rank's slot out. Larger ones go
//                   point-to-point: Open MPI copies a large message once, from the sender's memory
//                   into the receiver's (two copies here).
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
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/shm_steps.hpp"

namespace ftcc::comm::detail {

void shm_broadcast_run(OpContext& ctx, ShmSegment::Channel& ch, void* buf, std::size_t bytes, int root) {
  const ShmSegment::CallDesc desc = shm_bytes_call(ShmKind::broadcast, bytes, root);
  const ShmCall call(ctx, ch, &desc);
  auto* b = static_cast<std::byte*>(buf);
  const std::size_t per_round = ch.slot_bytes();
  const int me = ch.rank();
  for (std::size_t at = 0; at < bytes; at += per_round) {
    const std::size_t m = std::min(per_round, bytes - at);
    const std::uint64_t round = ch.next_round();
    std::byte* result = ch.slot(shm_generation(round), ch.size());
    if (me == root) {
      if (at == 0) shm_root_first_round(ctx, ch, round);
      shm_wait_for_all(ctx, ch, false, round - 1);
      shm_store(result, b + at, m);
      shm_raise(ctx, ch.reduced(me), round);
      shm_raise(ctx, ch.arrived(me), round);
    } else {
      if (at == 0) {
        shm_nonroot_first_round(ctx, ch, round, root);
      } else {
        shm_raise(ctx, ch.arrived(me), round);
        shm_wait_for(ctx, ch, true, root, round);
      }
      std::memcpy(b + at, result, m);
      if (const ReceiveHook* hook = ctx.receive_hook()) (*hook)(ctx.op(), ctx.tag(), b + at, m);
    }
  }
}

namespace {

// allgather (root < 0: every rank copies out) and gather (only the root does).
void gather_rounds(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv, std::size_t block_bytes,
                   int root) {
  const ShmSegment::CallDesc desc = shm_bytes_call(root < 0 ? ShmKind::allgather : ShmKind::gather, block_bytes, root);
  const ShmCall call(ctx, ch, &desc);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t per_round = ch.slot_bytes();
  for (std::size_t at = 0; at < block_bytes; at += per_round) {
    const std::size_t m = std::min(per_round, block_bytes - at);
    const int g = shm_generation(shm_open_round(ctx, ch, in + at, m));
    if (root >= 0 && ch.rank() != root) continue;
    for (int r = 0; r < ch.size(); ++r) {
      std::byte* to = out + static_cast<std::size_t>(r) * block_bytes + at;
      if (to == in + at) continue;  // in place: this rank's own block is there already
      std::memcpy(to, ch.slot(g, r), m);
      if (const ReceiveHook* hook = ctx.receive_hook(); hook != nullptr && r != ch.rank())
        (*hook)(ctx.op(), ctx.tag(), to, m);
    }
  }
}

}  // namespace

void shm_allgather_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv, std::size_t block_bytes) {
  gather_rounds(ctx, ch, send, recv, block_bytes, -1);
}

void shm_gather_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv, std::size_t block_bytes,
                    int root) {
  gather_rounds(ctx, ch, send, recv, block_bytes, root);
}

void shm_scatter_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv, std::size_t block_bytes,
                     int root) {
  const ShmSegment::CallDesc desc = shm_bytes_call(ShmKind::scatter, block_bytes, root);
  const ShmCall call(ctx, ch, &desc);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t per_round = ch.slot_bytes();
  const int me = ch.rank();
  if (me == root && out != nullptr && out != in + static_cast<std::size_t>(root) * block_bytes && block_bytes > 0)
    std::memcpy(out, in + static_cast<std::size_t>(root) * block_bytes, block_bytes);
  for (std::size_t at = 0; at < block_bytes; at += per_round) {
    const std::size_t m = std::min(per_round, block_bytes - at);
    const std::uint64_t round = ch.next_round();
    const int g = shm_generation(round);
    if (me == root) {
      if (at == 0) shm_root_first_round(ctx, ch, round);
      shm_wait_for_all(ctx, ch, false, round - 1);
      for (int r = 0; r < ch.size(); ++r)
        if (r != root) shm_store(ch.slot(g, r), in + static_cast<std::size_t>(r) * block_bytes + at, m);
      shm_raise(ctx, ch.reduced(me), round);
      shm_raise(ctx, ch.arrived(me), round);
    } else {
      if (at == 0) {
        shm_nonroot_first_round(ctx, ch, round, root);
      } else {
        shm_raise(ctx, ch.arrived(me), round);
        shm_wait_for(ctx, ch, true, root, round);
      }
      std::memcpy(out + at, ch.slot(g, me), m);
      if (const ReceiveHook* hook = ctx.receive_hook()) (*hook)(ctx.op(), ctx.tag(), out + at, m);
    }
  }
}

void shm_reduce_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv, std::size_t count,
                    DType dtype, ReduceOp op, int root) {
  const ShmSegment::CallDesc desc = shm_reduction_call(ShmKind::reduce, count, dtype, op, root);
  const ShmCall call(ctx, ch, &desc);
  const std::size_t w = dtype_size(dtype);
  const std::size_t per_round = ch.slot_bytes() / w;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const bool is_root = ch.rank() == root;
  for (std::size_t at = 0; at < count; at += per_round) {
    const std::size_t m = std::min(per_round, count - at);
    const std::uint64_t round = shm_open_round(ctx, ch, in + at * w, m * w);
    const int g = shm_generation(round);
    if (m * w <= kShmWholeRoundBytes) {  // the root alone reads the slots: the hook may work in place
      if (is_root) shm_reduce_slots(ctx, ch, g, out + at * w, 0, m, dtype, op, true);
      continue;
    }
    const std::size_t lo = shm_slice_at(m, w, ch.size(), ch.rank()), hi = shm_slice_at(m, w, ch.size(), ch.rank() + 1);
    std::byte* result = ch.slot(g, ch.size());
    shm_reduce_slots(ctx, ch, g, result + lo * w, lo, hi, dtype, op, true);
    shm_raise(ctx, ch.reduced(ch.rank()), round);
    if (!is_root) continue;
    shm_wait_for_all(ctx, ch, true, round);
    std::memcpy(out + at * w, result, m * w);
  }
}

bool shm_alltoallv_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, const std::size_t* send_counts,
                       const std::size_t* send_displs, void* recv, const std::size_t* recv_counts,
                       const std::size_t* recv_displs, std::size_t elem_bytes) {
  const ShmSegment::CallDesc desc = shm_bytes_call(ShmKind::alltoallv, elem_bytes);
  ShmCall call(ctx, ch, &desc);
  const int n = ch.size(), me = ch.rank();
  const auto nz = static_cast<std::size_t>(n);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  // One round: every rank writes its counts, sent and expected, and (when what it sends fits: at
  // most kShmAlltoallBytes in all, each message within its part) its messages, rank p's in part p.
  // Every rank reads every rank's counts, so all agree on the way the data goes (through the slots
  // only if every rank's fitted), and all find a mismatch.
  const std::size_t counts_bytes = (2 * nz * sizeof(std::uint64_t) + 63) / 64 * 64;
  FTCC_CHECK(counts_bytes < ch.slot_bytes()) << "alltoallv: too many ranks for a slot";
  const std::size_t part = (ch.slot_bytes() - counts_bytes) / nz / 64 * 64;  // each peer's part of a slot
  bool mine_fit = true;  // (the same test as all_fit's below, for this rank's messages)
  std::size_t my_sends = 0;
  for (int p = 0; p < n; ++p)
    if (p != me) {
      my_sends += send_counts[p] * elem_bytes;
      mine_fit = mine_fit && send_counts[p] * elem_bytes <= part;
    }
  mine_fit = mine_fit && my_sends <= kShmAlltoallBytes;
  const int g = shm_generation(shm_open_round_with(ctx, ch, [&](std::byte* slot) {
    for (std::size_t p = 0; p < nz; ++p) {
      const std::uint64_t c[2] = {send_counts[p], recv_counts[p]};
      std::memcpy(slot + p * sizeof c[0], &c[0], sizeof c[0]);
      std::memcpy(slot + (nz + p) * sizeof c[0], &c[1], sizeof c[1]);
    }
    if (!mine_fit) return;
    for (int p = 0; p < n; ++p)
      if (p != me && send_counts[p] > 0)
        shm_store(slot + counts_bytes + static_cast<std::size_t>(p) * part, in + send_displs[p] * elem_bytes,
                  send_counts[p] * elem_bytes);
  }));
  auto read = [&](int r, std::size_t i) {
    std::uint64_t c = 0;
    std::memcpy(&c, ch.slot(g, r) + i * sizeof c, sizeof c);
    return static_cast<std::size_t>(c);
  };
  auto count_of = [&](int from, int to) { return read(from, static_cast<std::size_t>(to)); };  // in elements
  auto expected = [&](int to, int from) { return read(to, nz + static_cast<std::size_t>(from)); };
  call.in_step();  // a mismatch is found by every rank, in this round
  bool all_fit = true;
  for (int p = 0; p < n; ++p) {
    std::size_t sends = 0;
    bool each = true;
    for (int q = 0; q < n; ++q) {
      FTCC_CHECK(count_of(p, q) == expected(q, p))
          << "alltoall: rank " << ch.comm_rank(q) << " expects " << expected(q, p) << " elements from rank "
          << ch.comm_rank(p) << ", which sends it " << count_of(p, q) << "; the counts must match";
      if (p == q) continue;
      sends += count_of(p, q) * elem_bytes;
      each = each && count_of(p, q) * elem_bytes <= part;
    }
    all_fit = all_fit && each && sends <= kShmAlltoallBytes;  // what mine_fit was on rank p
  }
  if (!all_fit) return false;  // every rank saw the same counts
  if (send_counts[me] > 0)
    std::memmove(out + recv_displs[me] * elem_bytes, in + send_displs[me] * elem_bytes, send_counts[me] * elem_bytes);
  for (int p = 0; p < n; ++p) {
    const std::size_t m = recv_counts[p] * elem_bytes;
    if (p == me || m == 0) continue;
    std::byte* to = out + recv_displs[p] * elem_bytes;
    std::memcpy(to, ch.slot(g, p) + counts_bytes + static_cast<std::size_t>(me) * part, m);
    if (const ReceiveHook* hook = ctx.receive_hook()) (*hook)(ctx.op(), ctx.tag(), to, m);
  }
  return true;
}

void shm_reduce_scatter_run(OpContext& ctx, ShmSegment::Channel& ch, const void* send, void* recv,
                            std::size_t recv_count, DType dtype, ReduceOp op) {
  const ShmSegment::CallDesc desc = shm_reduction_call(ShmKind::reduce_scatter, recv_count, dtype, op);
  const ShmCall call(ctx, ch, &desc);
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
  const ShmSegment::CallDesc desc = shm_bytes_call(ShmKind::barrier, 0);
  const ShmCall call(ctx, ch, &desc);
  const std::uint64_t round = ch.next_round();
  shm_wait_for_all(ctx, ch, false, round - 1);  // this generation's descriptors of round - 2 are read
  shm_announce(ch, round);
  shm_raise(ctx, ch.arrived(ch.rank()), round);
  shm_wait_for_all(ctx, ch, false, round);
  shm_verify(ctx, ch, round);
}

ShmSegment::Channel* one_host_channel(Communicator& comm) {
  ShmSegment* s = comm.shared_memory();
  return s != nullptr && s->hosts() == 1 ? &s->channel(0) : nullptr;
}

ShmSegment::Channel* blocking_channel(Communicator& comm) {
  ShmSegment* s = comm.shared_memory();
  return s != nullptr ? &s->channel(0) : nullptr;
}

}  // namespace ftcc::comm::detail
