#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/progress_thread.hpp"

#include <atomic>

#include <chrono>
#include <algorithm>
#include <cstdlib>
#include <thread>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "ftcc/base/env_number.hpp"
#include "ftcc/base/error.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/comm/mpi_transport.hpp"
#include "ftcc/comm/op_context.hpp"
#include "ftcc/comm/shm_segment.hpp"
#include "ftcc/comm/ulfm.hpp"

namespace ftcc::comm {
namespace {

constexpr std::align_val_t kScratchAlign{64};

std::mutex g_hook_mu;
FaultHook g_hook;                  // guarded by g_hook_mu for writes
const FaultHook* g_hook_ptr = nullptr;  // read without the lock inside collectives
ReceiveHook g_receive_hook;                       // guarded by g_hook_mu for writes
std::atomic<const ReceiveHook*> g_receive_hook_ptr{nullptr};

}  // namespace

double default_timeout_s() {
  // Parsed whole and range-checked (base/env_number.hpp): "5abc" is not 5 and "0" not 300; past
  // 1e6 s a deadline overflows the clock's nanoseconds and fires at once.
  return env_seconds("FTCC_COMM_TIMEOUT_S", 300.0, kMinTimeoutS, kMaxTimeoutS);
}

// ---- Scratch --------------------------------------------------------------------------------

Scratch::~Scratch() {
  for (std::byte* d : data_)
    if (d) ::operator delete[](d, kScratchAlign);
}

std::byte* Scratch::get(std::size_t bytes, int slot) {
  std::byte*& data = data_[slot];
  std::size_t& cap = capacity_[slot];
  if (bytes > cap || !data) {
    if (data) ::operator delete[](data, kScratchAlign);
    data = nullptr;
    cap = 0;
    const std::size_t want = std::max<std::size_t>(bytes, 64);
    data = static_cast<std::byte*>(::operator new[](want, kScratchAlign));
    cap = want;
  }
  return data;
}

void Scratch::poison() {
  for (int i = 0; i < kSlots; ++i) {
    data_[i] = nullptr;  // deliberately leaked: a cancelled receive may still write into it
    capacity_[i] = 0;
  }
}

// ---- Communicator ---------------------------------------------------------------------------

Communicator::Communicator(MPI_Comm comm, Ownership ownership, CommOptions options)
    : comm_(comm), owned_(ownership == Ownership::take) {
  FTCC_CHECK(comm != MPI_COMM_NULL) << "Communicator from MPI_COMM_NULL";
  FTCC_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), comm_, "MPI_Comm_set_errhandler");
  transport_ = std::make_unique<MpiTransport>(comm_);
  timeout_s_ = options.timeout_s > 0 ? options.timeout_s : default_timeout_s();
  init();
}

Communicator::Communicator(std::unique_ptr<Transport> transport, CommOptions options)
    : transport_(std::move(transport)) {
  FTCC_CHECK(transport_ != nullptr) << "Communicator from a null transport";
  comm_ = transport_->mpi_comm();
  timeout_s_ = options.timeout_s > 0 ? options.timeout_s : default_timeout_s();
  init();
}

void Communicator::init() {
  rank_ = transport_->rank();
  size_ = transport_->size();
  scratch_ = std::make_unique<Scratch>();
  tag_span_ = tags_used(transport_->tag_upper_bound()) - kMaxUserTag - 1;  // the last: liveness_tag()
  FTCC_CHECK(tag_span_ > 0) << "tag upper bound " << transport_->tag_upper_bound() << " too small";
  // Up to 1024 keys, leaving a window of at least 1024 collectives whose tags are unique (about
  // 1 M tags with Open MPI: 1024 keys).
  key_space_ = 1;
  while (key_space_ < 1024 && static_cast<int>(key_space_) * 2 * 1024 <= tag_span_) key_space_ *= 2;
}

int Communicator::tags_used(int tag_upper_bound) {
  return std::min(tag_upper_bound / 2 + 1, kMaxUserTag + (1 << 20));
}

Communicator Communicator::duplicate(MPI_Comm comm, CommOptions options) {
  MPI_Comm dup = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), comm, "MPI_Comm_set_errhandler");
  FTCC_MPI_CHECK(MPI_Comm_dup(comm, &dup), comm, "MPI_Comm_dup");
  return Communicator(dup, Ownership::take, options);
}

Communicator::Communicator(Communicator&& o) noexcept
    : comm_(o.comm_),
      owned_(o.owned_),
      transport_(std::move(o.transport_)),
      scratch_(std::move(o.scratch_)),
      rank_(o.rank_),
      size_(o.size_),
      timeout_s_(o.timeout_s_),
      seq_(o.seq_),
      tag_span_(o.tag_span_),
      hook_(std::move(o.hook_)),
      progress_(std::move(o.progress_)),
      shm_(std::move(o.shm_)),
      shm_tried_(o.shm_tried_) {
  o.comm_ = MPI_COMM_NULL;
  o.owned_ = false;
}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
  if (this != &o) {
    this->~Communicator();
    new (this) Communicator(std::move(o));
  }
  return *this;
}

Communicator::~Communicator() {
  progress_.reset();   // runs what is still queued (ends at once on a revoked communicator), joins
  shm_.reset();        // after the progress thread: its jobs use the segment's second channel
  transport_.reset();  // abandons anything still outstanding before the communicator goes
  int finalized = 0;
  MPI_Finalized(&finalized);  // a Communicator that outlives MPI_Finalize must not touch MPI
  if (!owned_ || comm_ == MPI_COMM_NULL || finalized) return;
  // A revoked communicator is not freed: its context id stays taken, so a message still in flight
  // on it (from a process the survivors excluded while it was stopped, which runs again for a
  // moment before it stops itself) can never be matched to a later communicator that would reuse
  // the id. One handle per recovery. (Open MPI 5.0.x crashed in MPI_Finalize otherwise:
  // tests/reliability/multihost.py, "hang host".)
  bool revoked = false;
  try {
    revoked = has_ulfm() && is_revoked(comm_);
  } catch (const std::exception&) {  // a destructor must not throw: free it as before
  }
  if (revoked) return;
  MPI_Comm_free(&comm_);
}

detail::ShmSegment* Communicator::shared_memory() {
  if (!shm_tried_) {
    shm_tried_ = true;  // also when attaching throws: the communicator is then lost anyway
    shm_ = detail::ShmSegment::attach(*this);
  }
  return shm_.get();
}

detail::ProgressThread& Communicator::progress() {
  if (!progress_) progress_ = std::make_unique<detail::ProgressThread>();
  return *progress_;
}

void Communicator::set_timeout_s(double seconds) {
  FTCC_CHECK(seconds > 0) << "timeout must be positive, got " << seconds;
  timeout_s_ = seconds;
}

void Communicator::set_fault_hook(FaultHook hook) { hook_ = std::move(hook); }

void Communicator::set_global_fault_hook(FaultHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_hook_ptr = nullptr;
  g_hook = std::move(hook);
  if (g_hook) g_hook_ptr = &g_hook;
}

const FaultHook* Communicator::fault_hook() const { return hook_ ? &hook_ : g_hook_ptr; }

void Communicator::set_global_receive_hook(ReceiveHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_receive_hook_ptr = nullptr;
  g_receive_hook = std::move(hook);
  if (g_receive_hook) g_receive_hook_ptr = &g_receive_hook;
}

const ReceiveHook* Communicator::receive_hook() { return g_receive_hook_ptr.load(std::memory_order_acquire); }

int Communicator::next_collective_tag(std::uint32_t key) {
  const std::uint64_t slot = seq_ * key_space_ + key % key_space_;
  const int tag = kMaxUserTag + static_cast<int>(slot % static_cast<std::uint64_t>(tag_span_));
  ++seq_;
  return tag;
}

std::uint32_t collective_key(const char* kind, std::size_t count, int dtype, int op, int root) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  for (const char* c = kind; *c; ++c) mix(static_cast<unsigned char>(*c));
  mix(count);
  mix(static_cast<std::uint64_t>(static_cast<std::int64_t>(dtype)));
  mix(static_cast<std::uint64_t>(static_cast<std::int64_t>(op)));
  mix(static_cast<std::uint64_t>(static_cast<std::int64_t>(root)));
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

// ---- point-to-point -------------------------------------------------------------------------

namespace {
void check_p2p(const Communicator& c, int peer, int tag, const char* op) {
  FTCC_CHECK(peer >= 0 && peer < c.size()) << op << ": peer " << peer << " not in [0, " << c.size() << ")";
  FTCC_CHECK(tag >= 0 && tag < Communicator::kMaxUserTag)
      << op << ": tag " << tag << " not in [0, " << Communicator::kMaxUserTag << ")";
}
}  // namespace

void Communicator::send(const void* buf, std::size_t count, DType dtype, int peer, int tag, double timeout_s) {
  check_p2p(*this, peer, tag, "send");
  OpContext ctx(*transport_, tag, resolve_timeout(timeout_s), "send", nullptr, *scratch_);
  ctx.wait(ctx.isend(buf, count * dtype_size(dtype), peer));
}

void Communicator::recv(void* buf, std::size_t count, DType dtype, int peer, int tag, double timeout_s) {
  check_p2p(*this, peer, tag, "recv");
  OpContext ctx(*transport_, tag, resolve_timeout(timeout_s), "recv", nullptr, *scratch_);
  ctx.wait(ctx.irecv(buf, count * dtype_size(dtype), peer));
}

P2PRequest Communicator::isend(const void* buf, std::size_t count, DType dtype, int peer, int tag) {
  check_p2p(*this, peer, tag, "isend");
  P2PRequest r;
  r.handle_ = transport_->isend(buf, count * dtype_size(dtype), peer, tag, "isend");
  r.comm_ = this;
  r.peer_ = peer;
  r.active_ = true;
  r.op_ = "isend";
  return r;
}

P2PRequest Communicator::irecv(void* buf, std::size_t count, DType dtype, int peer, int tag) {
  check_p2p(*this, peer, tag, "irecv");
  P2PRequest r;
  r.handle_ = transport_->irecv(buf, count * dtype_size(dtype), peer, tag, "irecv");
  r.comm_ = this;
  r.peer_ = peer;
  r.active_ = true;
  r.op_ = "irecv";
  return r;
}

P2PRequest::P2PRequest(P2PRequest&& o) noexcept
    : comm_(o.comm_), handle_(o.handle_), peer_(o.peer_), active_(o.active_), op_(o.op_) {
  o.active_ = false;
}

P2PRequest& P2PRequest::operator=(P2PRequest&& o) noexcept {
  if (this != &o) {
    if (active_) comm_->transport().abandon(handle_);
    comm_ = o.comm_;
    handle_ = o.handle_;
    peer_ = o.peer_;
    active_ = o.active_;
    op_ = o.op_;
    o.active_ = false;
  }
  return *this;
}

P2PRequest::~P2PRequest() {
  if (active_) comm_->transport().abandon(handle_);
}

bool P2PRequest::test() {
  if (!active_) return true;
  active_ = false;  // test() releases the handle on completion and on error
  if (comm_->transport().test(handle_, op_)) return true;
  active_ = true;
  return false;
}

namespace {
std::atomic<int> g_waits{0};
}  // namespace

int waits_in_progress() { return g_waits.load(std::memory_order_relaxed); }
detail::WaitInProgress::WaitInProgress() { g_waits.fetch_add(1, std::memory_order_relaxed); }
detail::WaitInProgress::~WaitInProgress() { g_waits.fetch_sub(1, std::memory_order_relaxed); }

void P2PRequest::wait(double timeout_s) {
  if (!active_) return;
  const detail::WaitInProgress waiting;
  const auto start = std::chrono::steady_clock::now();
  const double limit = comm_->resolve_timeout(timeout_s);
  unsigned idle = 0;
  while (!test()) {
    if (++idle > 4) std::this_thread::yield();
    if (idle % 64 == 0 && comm_->transport().revoked()) {  // see Transport::revoked
      comm_->transport().abandon(handle_);
      active_ = false;
      throw Revoked(op_, revoked_error_class());
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > limit) {
      comm_->transport().abandon(handle_);
      active_ = false;
      throw Timeout(op_, {peer_}, waited);
    }
  }
}

}  // namespace ftcc::comm
