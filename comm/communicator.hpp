// comm/communicator.hpp: a group of ranks that ftcc's collectives and point-to-point run on.
//
//   Communicator world(MPI_COMM_WORLD);                                   // borrowed, not freed
//   Communicator mine(survivors, Communicator::Ownership::take);         // freed by ~Communicator
//   auto dup = Communicator::duplicate(MPI_COMM_WORLD);                  // MPI_Comm_dup, owned
//   Communicator t(MemoryWorld::create(4)->endpoint(r));                 // threads, no MPI (tests)
//
// Every MPI communicator gets MPI_ERRORS_RETURN at construction, so failures come back as
// exceptions (comm/errors.hpp) and never abort the process.
//
// Deadlines: every wait polls with a deadline and throws Timeout{op, pending peers, waited_s}.
// The default is FTCC_COMM_TIMEOUT_S from the environment, else 300 s; set_timeout_s() changes
// it for this communicator and every call takes a timeout_s (0 = the communicator's).
//
// Ordering: like MPI collectives, all ranks must call the collectives of a communicator in the
// same order. Each collective takes the next per-communicator sequence number as its tag
// (mod the tag bound, above the user tag range), so back-to-back or concurrent (nonblocking)
// collectives never mix their messages. User point-to-point tags are 0 .. kMaxUserTag-1.
// A communicator uses only the lower half of its transport's tags (tags_used): the upper half is
// for its sub-groups (comm/subgroup_transport.hpp).
//
// Fault injection: set_fault_hook(f) (or set_global_fault_hook) makes every collective call
// f(op, step) just before it posts its step-th send (step = 0, 1, ... within that call; op is the
// algorithm's name such as "ring_allreduce"). A test can SIGKILL its own process from the hook to
// die in the middle of a collective, after part of its messages went out. When no hook is set the
// cost is one pointer test per message.
//
// Thread safety: one thread at a time per Communicator; a nonblocking allreduce runs on its own
// clone of the transport, so the caller may keep using the Communicator meanwhile.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ftcc/comm/transport.hpp"
#include "ftcc/comm/types.hpp"

namespace ftcc::comm {

namespace detail {
class ProgressThread;  // comm/progress_thread.hpp
class ShmSegment;      // comm/shm_segment.hpp
}

using FaultHook = std::function<void(const char* op, int step)>;
using ReceiveHook = std::function<void(const char* op, int tag, void* buf, std::size_t bytes)>;

// FTCC_COMM_TIMEOUT_S if set (seconds, in [kMinTimeoutS, kMaxTimeoutS]), else 300. A value that
// is not a number in that range throws ftcc::InvalidArgument naming the variable and the range.
inline constexpr double kMinTimeoutS = 0.001, kMaxTimeoutS = 1e6;
double default_timeout_s();
// A collective's call key for Communicator::next_collective_tag: its kind ("allreduce", ...),
// count (elements for reductions, bytes for the others), dtype and op of a reduction and root
// (-1 where none).
std::uint32_t collective_key(const char* kind, std::size_t count, int dtype = -1, int op = -1, int root = -1);
// Checks FTCC_SHM_BACKING (memfd, the default, or posix: comm/shm_segment.hpp): throws
// ftcc::InvalidArgument naming the value when it is neither. A communicator's shared-memory
// set-up refuses such a value on every rank; a launcher checks it before MPI starts.
void check_shm_backing_setting();
// Collectives and point-to-point waits of this process in progress now. Progress watchdogs
// (recovery/progress_watchdog.hpp) do not count time spent waiting for peers: the deadlines
// above bound that.
int waits_in_progress();
namespace detail {
struct WaitInProgress {
  WaitInProgress();
  ~WaitInProgress();
  WaitInProgress(const WaitInProgress&) = delete;
  WaitInProgress& operator=(const WaitInProgress&) = delete;
};
}  // namespace detail

struct CommOptions {
  double timeout_s = 0;  // 0: default_timeout_s()
};

// Reusable scratch memory for collectives (64-byte aligned, grows, contents not preserved).
// Five independent slots: slot 0 for the pipeline engines' receive slots (ring_phases,
// tree_phases), slot 1 for an algorithm's own staging buffer, slot 2 for a collective made of
// another one (the hierarchical allreduce's slices, which its exchange between hosts sends and
// receives in place, using slots 0 and 1 itself), slots 3 and 4 for the other hierarchical
// collectives' per-host buffers (comm/hierarchical_collectives.cpp).
// poison() abandons the current blocks for good: used when a cancelled receive might still write
// into them, so that memory is never handed out again (a bounded leak on an error path only).
class Scratch {
 public:
  static constexpr int kSlots = 5;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  std::byte* get(std::size_t bytes, int slot = 0);
  void poison();

 private:
  std::byte* data_[kSlots] = {};
  std::size_t capacity_[kSlots] = {};
};

class Communicator;

// A nonblocking point-to-point operation (Communicator::isend / irecv). Move-only; the destructor
// of a request that was neither waited nor completed abandons it.
class P2PRequest {
 public:
  P2PRequest() = default;
  P2PRequest(P2PRequest&& o) noexcept;
  P2PRequest& operator=(P2PRequest&& o) noexcept;
  ~P2PRequest();
  bool test();                      // true once complete; throws on failure
  void wait(double timeout_s = 0);  // 0: the communicator's timeout

 private:
  friend class Communicator;
  Communicator* comm_ = nullptr;
  Transport::Handle handle_ = 0;
  int peer_ = -1;
  bool active_ = false;
  const char* op_ = "";
};

class Communicator {
 public:
  enum class Ownership { borrow, take };
  static constexpr int kMaxUserTag = 4096;
  // The tags [0, tags_used(ub)) a communicator on a transport with tag upper bound ub uses: the
  // user tags, then at most 2^20 collective tags, within the lower half of [0, ub].
  static int tags_used(int tag_upper_bound);

  explicit Communicator(MPI_Comm comm, Ownership ownership = Ownership::borrow, CommOptions options = {});
  explicit Communicator(std::unique_ptr<Transport> transport, CommOptions options = {});
  // MPI_Comm_dup(comm) owned by the result (collective over comm).
  static Communicator duplicate(MPI_Comm comm, CommOptions options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The MPI communicator (MPI_COMM_NULL for a memory transport). Still owned by this object.
  MPI_Comm raw() const { return comm_; }

  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds);
  // Resolves a per-call timeout: 0 -> this communicator's.
  double resolve_timeout(double call_timeout_s) const { return call_timeout_s > 0 ? call_timeout_s : timeout_s_; }

  void set_fault_hook(FaultHook hook);
  static void set_global_fault_hook(FaultHook hook);
  // The hook collectives call: this communicator's, else the global one, else nullptr.
  const FaultHook* fault_hook() const;
  static void set_global_receive_hook(ReceiveHook hook);
  static const ReceiveHook* receive_hook();

  // Blocking point-to-point with a deadline. recv's count must equal the sender's count.
  void send(const void* buf, std::size_t count, DType dtype, int peer, int tag = 0, double timeout_s = 0);
  void recv(void* buf, std::size_t count, DType dtype, int peer, int tag = 0, double timeout_s = 0);
  // Nonblocking point-to-point; the buffer must stay valid until the request completes.
  P2PRequest isend(const void* buf, std::size_t count, DType dtype, int peer, int tag = 0);
  P2PRequest irecv(void* buf, std::size_t count, DType dtype, int peer, int tag = 0);

  // For the algorithms (comm/op_context.hpp): the endpoint, the next collective tag, scratch.
  // `key` (collective_key below) is folded into the tag: ranks calling different collectives at
  // the same point of their sequence use different tags, so over MPI point-to-point their
  // messages never match (no garbage; the wait ends at its deadline with a Timeout). With an MPI
  // whose tag upper bound is small, fewer keys fit (down to none).
  Transport& transport() { return *transport_; }
  int next_collective_tag(std::uint32_t key = 0);
  Scratch& scratch() { return *scratch_; }
  // Tags in flight are unique only within a window of this many collectives.
  int collective_tag_span() const { return tag_span_; }
  // The thread of this communicator's nonblocking collectives (started on first use).
  detail::ProgressThread& progress();
  // The shared-memory segment of this communicator when some host runs several of its ranks
  // (comm/shm_segment.hpp), else nullptr. The first call attaches it and is collective: the
  // collectives make it at the same point of every rank's collective sequence.
  detail::ShmSegment* shared_memory();
  // True once shared_memory() attached a segment (the collectives then run through it).
  bool uses_shared_memory() const { return shm_ != nullptr; }
  // The tag of the segment's liveness receives, just past the collective tags: nothing sends on it.
  int liveness_tag() const { return kMaxUserTag + tag_span_; }

 private:
  friend class P2PRequest;
  void init();

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Scratch> scratch_;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 300;
  std::uint64_t seq_ = 0;
  int tag_span_ = 1;
  std::uint32_t key_space_ = 1;  // keys folded into a collective's tag (a power of two)
  FaultHook hook_;
  std::unique_ptr<detail::ProgressThread> progress_;
  std::unique_ptr<detail::ShmSegment> shm_;
  bool shm_tried_ = false;
};

}  // namespace ftcc::comm
