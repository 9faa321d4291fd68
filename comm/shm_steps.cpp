#include "ftcc/comm/shm_steps.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <string>

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

}  // namespace

ShmCall::ShmCall(const OpContext& ctx, ShmSegment::Channel& ch) : ch_(ch), uncaught_(std::uncaught_exceptions()) {
  if (ch.broken())
    throw CommError(ctx.op(), "this communicator's shared memory is unusable: an earlier collective on it failed, and "
                              "its ranks may be at different rounds; revoke and shrink the communicator, or make a new one");
}

ShmCall::~ShmCall() {
  if (std::uncaught_exceptions() > uncaught_ && !in_step_) ch_.mark_broken();
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
  for (unsigned idle = 1; f.value.load(std::memory_order_acquire) < round; ++idle) {
    if (idle % kLivenessEvery == 0) ch.check_peers(ctx.op());
    ctx.idle_waiting_for(ch.comm_rank(p));
  }
  ctx.progressed();
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
