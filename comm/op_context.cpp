#include "ftcc/comm/op_context.hpp"

#include <algorithm>
#include <cstdint>
#include <thread>

#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FTCC_CPU_RELAX() _mm_pause()
#else
#define FTCC_CPU_RELAX() ((void)0)
#endif

namespace ftcc::comm {
namespace {

// Backoff: a few pause spins (the answer is often already on its way), then yield the core,
// since ranks usually outnumber cores on a test machine and a spinning rank starves its peer.
constexpr unsigned kSpinRounds = 4;
// Reading the clock on every idle round is cheap next to sched_yield, but not free.
constexpr unsigned kClockEvery = 4;
// How often a stalled wait asks whether the communicator was revoked (see Transport::revoked).
constexpr unsigned kRevokeCheckEvery = 64;

}  // namespace

OpContext::OpContext(Communicator& comm, const char* op, double call_timeout_s, std::uint32_t key)
    : OpContext(comm.transport(), comm.next_collective_tag(key), comm.resolve_timeout(call_timeout_s), op,
                comm.fault_hook(), comm.scratch()) {}

OpContext::OpContext(Transport& transport, int tag, double timeout_s, const char* op, const FaultHook* hook,
                     Scratch& scratch)
    : t_(transport),
      tag_(tag),
      op_(op),
      hook_(hook),
      receive_hook_(Communicator::receive_hook()),
      scratch_(scratch),
      rank_(transport.rank()),
      size_(transport.size()),
      start_(std::chrono::steady_clock::now()) {
  deadline_ = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(timeout_s));
  pending_.reserve(16);
}

OpContext::OpContext(OpContext& whole, Transport& transport, const std::vector<int>& names)
    : t_(transport),
      tag_(whole.tag_),
      op_(whole.op_),
      hook_(whole.hook_),
      receive_hook_(whole.receive_hook_),
      scratch_(whole.scratch_),
      rank_(transport.rank()),
      size_(transport.size()),
      step_(whole.step_),
      start_(whole.start_),
      deadline_(whole.deadline_),
      whole_(&whole),
      names_(&names) {
  pending_.reserve(16);
}

OpContext::~OpContext() {
  if (whole_) whole_->step_ = step_;
  bool safe = true;
  for (const Pending& p : pending_) safe = t_.abandon(p.h) && safe;
  if (!safe) scratch_.poison();
}

double OpContext::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

OpContext::Handle OpContext::isend(const void* buf, std::size_t bytes, int peer) {
  before_send();
  const Handle h = t_.isend(buf, bytes, peer, tag_, op_);
  pending_.push_back({h, peer, false, nullptr, 0});
  return h;
}

OpContext::Handle OpContext::irecv(void* buf, std::size_t bytes, int peer) {
  const Handle h = t_.irecv(buf, bytes, peer, tag_, op_);
  pending_.push_back({h, peer, true, buf, bytes});
  return h;
}

void OpContext::forget(Handle h) {
  for (std::size_t i = 0; i < pending_.size(); ++i)
    if (pending_[i].h == h) {
      pending_[i] = pending_.back();
      pending_.pop_back();
      return;
    }
}

bool OpContext::test(Handle h) {
  bool done = false;
  try {
    done = t_.test(h, op_);
  } catch (...) {
    forget(h);  // the transport released it
    throw;
  }
  if (done) {
    if (receive_hook_)
      for (const Pending& p : pending_)
        if (p.h == h && p.recv) (*receive_hook_)(op_, tag_, p.buf, p.bytes);
    forget(h);
  }
  return done;
}

void OpContext::wait_all(const Handle* hs, std::size_t n) {
  // Completion flags without a heap allocation in the common case (the algorithms wait on pairs).
  std::vector<bool> big;
  std::uint64_t small = 0;
  if (n > 64) big.assign(n, false);
  auto done = [&](std::size_t i) { return n > 64 ? static_cast<bool>(big[i]) : ((small >> i) & 1u) != 0; };
  auto mark = [&](std::size_t i) {
    if (n > 64)
      big[i] = true;
    else
      small |= std::uint64_t{1} << i;
  };
  std::size_t left = n;
  while (left) {
    bool any = false;
    for (std::size_t i = 0; i < n; ++i)
      if (!done(i) && test(hs[i])) {
        mark(i);
        --left;
        any = true;
      }
    if (!left) break;
    if (any)
      progressed();
    else
      idle();
  }
  progressed();
}

void OpContext::idle() {
  ++idle_rounds_;
  if (idle_rounds_ <= kSpinRounds) {
    FTCC_CPU_RELAX();
    return;
  }
  std::this_thread::yield();
  if (idle_rounds_ % kRevokeCheckEvery == 0 && t_.revoked()) throw Revoked(op_, revoked_error_class());
  if (idle_rounds_ % kClockEvery == 0 && std::chrono::steady_clock::now() > deadline_) throw_timeout();
}

void OpContext::throw_timeout() {
  // Receives first: a peer that never sent is the usual culprit; then peers that never received.
  // A wait on shared memory (the communicator's rank it polls) comes before them all.
  std::vector<int> peers;
  if (waiting_for_ >= 0) peers.push_back(waiting_for_);
  for (bool want_recv : {true, false})
    for (const Pending& p : pending_) {
      const int peer = names_ ? names_->at(static_cast<std::size_t>(p.peer)) : p.peer;
      if (p.recv == want_recv && std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
    }
  throw Timeout(op_, std::move(peers), elapsed_s());
}

}  // namespace ftcc::comm
