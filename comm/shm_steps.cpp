#include "ftcc/comm/shm_steps.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>
#include <vector>

// The sanitizers see no streaming store (GCC instruments none): under them, plain copies.
#if defined(__SSE2__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FTCC_SHM_STREAM 1
#include <emmintrin.h>
#endif

#include "ftcc/comm/errors.hpp"

#include "ftcc/comm/reduce_kernels.hpp"

namespace ftcc::comm::detail {
namespace {

constexpr unsigned kLivenessEvery = 64;  // idle rounds between two looks at the liveness receives
constexpr std::uint64_t kClaimRanks = 65536;  // a root claim: round * kClaimRanks + host rank + 1
constexpr const char* kMismatchAdvice =
    ". Every rank must call the same collectives in the same order, with the same count, dtype, op and root";

// Polls until done(), with the deadline and back-off of every ftcc wait and, every few idle
// rounds, the channel's liveness receives; a Timeout names host rank p.
template <class Done>
void wait_until(OpContext& ctx, ShmSegment::Channel& ch, int p, Done&& done) {
  for (unsigned idle = 1; !done(); ++idle) {
    if (idle % kLivenessEvery == 0) ch.check_peers(ctx.op());
    ctx.idle_waiting_for(ch.comm_rank(p));
  }
  ctx.progressed();
}

}  // namespace

ShmCall::ShmCall(const OpContext& ctx, ShmSegment::Channel& ch, const ShmSegment::CallDesc* desc)
    : ch_(ch), uncaught_(std::uncaught_exceptions()) {
  if (ch.broken())
    throw CommError(ctx.op(), "this communicator's shared memory is unusable: an earlier collective on it failed, and "
                              "its ranks may be at different rounds; revoke and shrink the communicator, or make a new one");
  ch.clear_mismatch_thrown();  // (a call starts only after the last one's exception was handled)
  if (desc != nullptr && ch.pending() == nullptr) {
    ch.set_pending(*desc);
    set_pending_ = true;
  }
}

ShmCall::~ShmCall() {
  if (set_pending_) ch_.clear_pending();
  if (std::uncaught_exceptions() > uncaught_ && !in_step_ && !ch_.mismatch_thrown()) ch_.mark_broken();
}

ShmSegment::CallDesc shm_reduction_call(ShmKind kind, std::size_t count, DType dtype, ReduceOp op, int root) {
  ShmSegment::CallDesc d;
  d.kind = static_cast<std::int8_t>(kind);
  d.count = count;
  d.dtype = static_cast<std::int8_t>(dtype);
  d.op = static_cast<std::int8_t>(op);
  d.root = root;
  return d;
}

ShmSegment::CallDesc shm_bytes_call(ShmKind kind, std::size_t bytes, int root) {
  ShmSegment::CallDesc d;
  d.kind = static_cast<std::int8_t>(kind);
  d.count = bytes;
  d.root = root;
  return d;
}

namespace {

const char* kind_name(std::int32_t k) {
  switch (static_cast<ShmKind>(k)) {
    case ShmKind::allreduce: return "allreduce";
    case ShmKind::broadcast: return "broadcast";
    case ShmKind::reduce: return "reduce";
    case ShmKind::allgather: return "allgather";
    case ShmKind::gather: return "gather";
    case ShmKind::scatter: return "scatter";
    case ShmKind::alltoallv: return "alltoallv";
    case ShmKind::reduce_scatter: return "reduce_scatter";
    case ShmKind::barrier: return "barrier";
  }
  return "an unknown collective";
}

// "allreduce(sum, f32, 4 elements)", "broadcast(16 bytes, root 2)": what a rank called.
std::string describe(const ShmSegment::Channel& ch, const ShmSegment::CallDesc& d) {
  std::string s = std::string(kind_name(d.kind)) + "(";
  if (d.dtype >= 0) {
    s += std::string(to_string(static_cast<ReduceOp>(d.op))) + ", " + to_string(static_cast<DType>(d.dtype)) + ", " +
         std::to_string(d.count) + " elements";
  } else if (static_cast<ShmKind>(d.kind) == ShmKind::alltoallv) {
    s += std::to_string(d.count) + "-byte elements";
  } else if (static_cast<ShmKind>(d.kind) != ShmKind::barrier) {
    s += std::to_string(d.count) + " bytes";
  }
  if (d.root >= 0 && d.root < ch.size()) s += ", root " + std::to_string(ch.comm_rank(d.root));
  return s + ")";
}

}  // namespace

void shm_announce(ShmSegment::Channel& ch, std::uint64_t round) {
  const ShmSegment::CallDesc* mine = ch.pending();
  if (mine == nullptr || ch.size() < 2) return;  // (a rank alone on its host maps no segment)
  ShmSegment::CallDesc& slot = ch.call(shm_generation(round), ch.rank());
  slot = *mine;
  slot.round = round;  // published by the `arrived` flag's release store that follows
}

void shm_verify(OpContext& ctx, ShmSegment::Channel& ch, std::uint64_t round) {
  if (ch.pending() == nullptr) return;
  ch.clear_pending();
  if (ch.size() < 2) return;
  const int g = shm_generation(round);
  bool same = true;
  for (int r = 0; r < ch.size(); ++r) {
    const ShmSegment::CallDesc& d = ch.call(g, r);
    same = same && d.round == round && d == ch.call(g, 0);
  }
  if (same) return;
  // Every rank read the same descriptors: the same message everywhere. Ranks grouped by call, in
  // the order of their first rank.
  std::vector<std::pair<std::string, std::vector<int>>> calls;
  for (int r = 0; r < ch.size(); ++r) {
    const ShmSegment::CallDesc& d = ch.call(g, r);
    const std::string what = d.round == round ? describe(ch, d) : "a collective of another kind (no descriptor)";
    auto it = std::find_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first == what; });
    if (it == calls.end()) calls.push_back({what, {ch.comm_rank(r)}});
    else it->second.push_back(ch.comm_rank(r));
  }
  std::string msg = "collective mismatch: ";
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& ranks = calls[i].second;
    msg += (i ? "; " : "") + std::string(ranks.size() > 1 ? "ranks " : "rank ");
    for (std::size_t k = 0; k < ranks.size(); ++k) msg += (k ? ", " : "") + std::to_string(ranks[k]);
    msg += " called " + calls[i].first;
  }
  msg += kMismatchAdvice;
  ch.set_mismatch_thrown();
  throw CollectiveMismatch(ctx.op(), msg);
}

void shm_root_first_round(OpContext& ctx, ShmSegment::Channel& ch, std::uint64_t round) {
  if (ch.pending() == nullptr) return;
  const ShmSegment::CallDesc mine = *ch.pending();
  // The descriptors of round - 2 (the same generation) may still be read: write this one once
  // every rank is done with that round (the root waits for it before writing data anyway).
  shm_wait_for_all(ctx, ch, false, round - 1);
  shm_announce(ch, round);
  ch.clear_pending();
  if (ch.size() < 2) return;
  const int g = shm_generation(round);
  std::atomic<std::uint64_t>& claim = ch.claim(g).value;
  const std::uint64_t want = round * kClaimRanks + static_cast<std::uint64_t>(ch.rank()) + 1;
  std::uint64_t cur = claim.load(std::memory_order_acquire);
  while (cur / kClaimRanks != round)
    if (claim.compare_exchange_weak(cur, want, std::memory_order_acq_rel, std::memory_order_acquire)) return;
  // Another rank took this round as a root first (its descriptor was written before its claim).
  // Raise `arrived` without `reduced`: the ranks that named this one as their root learn that it
  // will write nothing (shm_nonroot_first_round).
  shm_raise(ctx, ch.arrived(ch.rank()), round);
  const int other = static_cast<int>(cur % kClaimRanks) - 1;
  const ShmSegment::CallDesc& d = ch.call(g, other);
  throw CollectiveMismatch(ctx.op(), "collective mismatch: rank " + std::to_string(ch.comm_rank(other)) + " called " +
                                         describe(ch, d) + " and rank " + std::to_string(ch.comm_rank(ch.rank())) +
                                         " called " + describe(ch, mine) + ", both as the root at the same point" +
                                         kMismatchAdvice);
}

void shm_nonroot_first_round(OpContext& ctx, ShmSegment::Channel& ch, std::uint64_t round, int root) {
  const bool check = ch.pending() != nullptr && ch.size() > 1;
  const ShmSegment::CallDesc mine = check ? *ch.pending() : ShmSegment::CallDesc{};
  // As the root's: this generation's descriptors of round - 2 may still be read until every rank
  // is done with that round.
  if (check) shm_wait_for_all(ctx, ch, false, round - 1);
  shm_announce(ch, round);
  ch.clear_pending();
  shm_raise(ctx, ch.arrived(ch.rank()), round);
  if (!check) {
    shm_wait_for(ctx, ch, true, root, round);
    return;
  }
  // Until the root's `reduced` flag is up, or its `arrived` flag (a root in another collective may
  // never raise `reduced`): either way its descriptor of this round is written.
  ShmSegment::Flag& reduced = ch.reduced(root);
  ShmSegment::Flag& arrived = ch.arrived(root);
  wait_until(ctx, ch, root, [&] {
    return reduced.value.load(std::memory_order_acquire) >= round || arrived.value.load(std::memory_order_acquire) >= round;
  });
  const ShmSegment::CallDesc& d = ch.call(shm_generation(round), root);
  if (d.round == round && d == mine) {
    if (reduced.value.load(std::memory_order_acquire) >= round) return;  // (the root raises it before `arrived`)
    throw CollectiveMismatch(ctx.op(), "collective mismatch: rank " + std::to_string(ch.comm_rank(root)) +
                                           ", the root rank " + std::to_string(ch.comm_rank(ch.rank())) + " named, found "
                                           "another rank calling " + kind_name(mine.kind) +
                                           " as the root at the same point" + kMismatchAdvice);
  }
  throw CollectiveMismatch(ctx.op(), "collective mismatch: rank " + std::to_string(ch.comm_rank(root)) + ", the root rank " +
                                         std::to_string(ch.comm_rank(ch.rank())) + " named, called " +
                                         (d.round == round ? describe(ch, d) : std::string("another collective")) +
                                         "; rank " + std::to_string(ch.comm_rank(ch.rank())) + " called " +
                                         describe(ch, mine) + kMismatchAdvice);
}

void shm_store(void* dst, const void* src, std::size_t bytes) {
#if defined(FTCC_SHM_STREAM)
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read once; nothing in ftcc calls setenv
  static const bool stream = [] { const char* s = std::getenv("FTCC_SHM_STREAM"); return !(s && std::string(s) == "0"); }();
  if (stream && bytes >= kShmStreamBytes) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;  // to 16-byte alignment
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    const std::size_t body = bytes / 64 * 64;
    for (std::size_t i = 0; i < body; i += 64) {
      auto* to = reinterpret_cast<__m128i*>(d + i);
      const auto* from = reinterpret_cast<const __m128i*>(s + i);
      _mm_stream_si128(to, _mm_loadu_si128(from));
      _mm_stream_si128(to + 1, _mm_loadu_si128(from + 1));
      _mm_stream_si128(to + 2, _mm_loadu_si128(from + 2));
      _mm_stream_si128(to + 3, _mm_loadu_si128(from + 3));
    }
    std::memcpy(d + body, s + body, bytes - body);
    _mm_sfence();  // streaming stores are weakly ordered: complete them before the flag's store
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

void shm_raise(OpContext& ctx, ShmSegment::Flag& flag, std::uint64_t round) {
  ctx.before_send();
  flag.value.store(round, std::memory_order_release);
}

void shm_wait_for(OpContext& ctx, ShmSegment::Channel& ch, bool reduced, int p, std::uint64_t round) {
  ShmSegment::Flag& f = reduced ? ch.reduced(p) : ch.arrived(p);
  wait_until(ctx, ch, p, [&] { return f.value.load(std::memory_order_acquire) >= round; });
}

void shm_wait_for_all(OpContext& ctx, ShmSegment::Channel& ch, bool reduced, std::uint64_t round) {
  for (int p = 0; p < ch.size(); ++p) shm_wait_for(ctx, ch, reduced, p, round);
}

std::uint64_t shm_open_round(OpContext& ctx, ShmSegment::Channel& ch, const std::byte* piece, std::size_t bytes) {
  return shm_open_round_with(ctx, ch, [&](std::byte* slot) { shm_store(slot, piece, bytes); });
}

void shm_reduce_slots(OpContext& ctx, const ShmSegment::Channel& ch, int generation, void* out, std::size_t lo,
                      std::size_t hi, DType dtype, ReduceOp op, bool in_place) {
  if (hi <= lo) return;
  const std::size_t w = dtype_size(dtype), k = hi - lo;
  const ReceiveHook* hook = ctx.receive_hook();
  std::byte* copies = hook != nullptr && !in_place ? ctx.scratch(static_cast<std::size_t>(ch.size()) * k * w, 1) : nullptr;
  auto part = [&](int r) -> const std::byte* {
    std::byte* at = ch.slot(generation, r) + lo * w;
    if (hook != nullptr && r != ch.rank()) {
      if (copies != nullptr) at = static_cast<std::byte*>(std::memcpy(copies + static_cast<std::size_t>(r) * k * w, at, k * w));
      (*hook)(ctx.op(), ctx.tag(), at, k * w);
    }
    return at;
  };
  if (ch.size() == 1) {
    std::memcpy(out, part(0), k * w);
    return;
  }
  const std::byte* first = part(0);
  const std::byte* second = part(1);
  reduce(out, first, second, k, dtype, op);
  for (int r = 2; r < ch.size(); ++r) reduce(out, out, part(r), k, dtype, op);
}

std::size_t shm_slice_at(std::size_t m, std::size_t elem_bytes, int ranks, int r) {
  const std::size_t grain = std::max<std::size_t>(1, 64 / elem_bytes), n = static_cast<std::size_t>(ranks);
  const std::size_t slice = (m + n * grain - 1) / (n * grain) * grain;
  return std::min(m, static_cast<std::size_t>(r) * slice);
}

}  // namespace ftcc::comm::detail
