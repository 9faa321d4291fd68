// recovery/group_internals.hpp: the pieces of ResilientGroup that its source files share
// (resilient_group.cpp, group_bootstrap.cpp, group_services.cpp, membership_protocol.cpp,
// respawn.cpp). Not installed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/recovery/call_deadline.hpp"
#include "ftcc/recovery/job_outcome.hpp"
#include "ftcc/recovery/progress_watchdog.hpp"
#include "ftcc/recovery/resilient_group.hpp"

namespace ftcc::recovery {
namespace detail {

using Steady = std::chrono::steady_clock;

inline double ms_between(Steady::time_point a, Steady::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

inline std::int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Fixed-size record of a rank's identity and heartbeat address, exchanged at start.
struct WirePeer {
  char host[64];
  char ip[48];
  std::uint32_t port;
  std::int32_t pid;
  std::uint64_t start_time;
  std::int32_t rank;
  std::int32_t pad;
  char host_id[96];
  char mpi_nspace[256];
  std::uint32_t mpi_rank;
  std::int32_t pad2;
};
static_assert(sizeof(WirePeer) % 8 == 0);
inline constexpr size_t kWireWords = sizeof(WirePeer) / 8;

// Fixed room for a job-level error's message in the agreement table (bytes, multiple of 8).
inline constexpr size_t kMessageBytes = 2048;

inline PeerAddress peer_of(const WirePeer& w) {
  PeerAddress p;
  p.rank = w.rank;
  p.host.assign(w.host, strnlen(w.host, sizeof w.host));
  p.ip.assign(w.ip, strnlen(w.ip, sizeof w.ip));
  p.port = static_cast<std::uint16_t>(w.port);
  p.pid = w.pid;
  p.start_time = w.start_time;
  p.host_id.assign(w.host_id, strnlen(w.host_id, sizeof w.host_id));
  p.mpi_nspace.assign(w.mpi_nspace, strnlen(w.mpi_nspace, sizeof w.mpi_nspace));
  p.mpi_rank = w.mpi_rank;
  return p;
}

inline WirePeer wire_of(const PeerAddress& p) {
  WirePeer w{};
  std::strncpy(w.host, p.host.c_str(), sizeof w.host - 1);
  std::strncpy(w.ip, p.ip.c_str(), sizeof w.ip - 1);
  w.port = p.port;
  w.pid = p.pid;
  w.start_time = p.start_time;
  w.rank = p.rank;
  std::strncpy(w.host_id, p.host_id.c_str(), sizeof w.host_id - 1);
  std::strncpy(w.mpi_nspace, p.mpi_nspace.c_str(), sizeof w.mpi_nspace - 1);
  w.mpi_rank = p.mpi_rank;
  return w;
}

// recovery/group_bootstrap.cpp: the ULFM-call deadline in seconds (the environment's when the
// option is 0), and the options check made before any communication.
inline double ulfm_timeout_of(double opt, const GroupEnvironment& env) { return opt != 0 ? opt : env.ulfm_timeout_s; }
void validate_options(const GroupOptions& o, int world);
// recovery/group_services.cpp: once per process: the exit guard and SIGPIPE ignored.
void install_process_guards();

// The job's scratch folder on this host (fault timestamps).
inline std::string event_dir_of(std::uint64_t job_id) {
  char dir[64];
  std::snprintf(dir, sizeof dir, "/tmp/ftcc-job-%016llx", static_cast<unsigned long long>(job_id));
  return dir;
}

}  // namespace detail

using detail::kMessageBytes;
using detail::kWireWords;
using detail::WirePeer;
using detail::ms_between;
using detail::Steady;
using detail::wall_ns;

// One recovery's timing (RecoveryEvent's *_ms): when this rank noticed the trouble, before the
// entry agreement (which waits for the others), and the end of the last timed phase; from the
// agreed table, the earliest notice of any survivor and the recorded time of the fault.
struct ResilientGroup::RecoveryClock {
  std::int64_t notice_wall_ns;          // wall clock: comparable across ranks
  Steady::time_point notice;
  Steady::time_point mark;              // end of the last phase
  std::int64_t first_notice_ns = 0;     // earliest notice over the survivors
  std::int64_t fault_ns = -1;           // earliest injected fault of a lost rank, else the start of the
                                        // earliest silence a heartbeat found; -1 = neither

  static RecoveryClock start() {
    const auto now = Steady::now();
    return {wall_ns(), now, now};
  }
  void start_phase() { mark = Steady::now(); }
  // Milliseconds since the last mark; the next phase starts now.
  double lap() {
    const auto now = Steady::now();
    const double ms = ms_between(mark, now);
    mark = now;
    return ms;
  }
  double detect_ms() const { return fault_ns >= 0 ? static_cast<double>(first_notice_ns - fault_ns) / 1e6 : -1.0; }
  // From the failure (the fault time, else the first notice) to the last mark.
  double total_ms() const {
    return fault_ns >= 0 ? static_cast<double>(wall_ns() - fault_ns) / 1e6
                         : ms_between(notice, mark) + static_cast<double>(notice_wall_ns - first_notice_ns) / 1e6;
  }
};

// Step 2's table, one row of int64 per new rank: [0] original rank, [1] committed step,
// [2] notice time (wall ns), [3] job-error status (0 = none), [4] the error's step, [5] flags
// (kEnding: a training rank whose program is past its loop, its hooks cleared), [6] when the
// earliest silence this rank's heartbeat found began (wall ns, 0 = none), then the bitmask
// of the deaths this rank confirmed (by original rank), then the error message.
class ResilientGroup::AgreedTable {
 public:
  explicit AgreedTable(size_t initial_size) : mask_words_((initial_size + 63) / 64) {}

  static constexpr std::int64_t kEnding = 1;
  std::vector<std::int64_t> row_of(int original_rank, std::int64_t committed, std::int64_t notice_ns,
                                   const PendingError* error, const std::vector<int>& confirmed,
                                   std::int64_t flags = 0, std::int64_t silence_began_ns = 0) const {
    std::vector<std::int64_t> row(row_words(), 0);
    row[0] = original_rank;
    row[1] = committed;
    row[2] = notice_ns;
    row[5] = flags;
    row[6] = silence_began_ns;
    if (error) {
      row[3] = static_cast<std::int64_t>(error->status);
      row[4] = error->step;
      std::memcpy(&row[msg_at()], error->message.c_str(), std::min(error->message.size(), kMessageBytes - 1));
    }
    for (int r : confirmed) row[kMaskAt + static_cast<size_t>(r) / 64] |= std::int64_t{1} << (r % 64);
    return row;
  }
  // Our allgather of every survivor's row; throws FaultDetected like any collective.
  void gather(FtComm& c, const std::vector<std::int64_t>& mine) {
    rows_ = c.size();
    cells_.assign(row_words() * static_cast<size_t>(rows_), 0);
    c.allgather(mine.data(), cells_.data(), row_words());
  }

  int rows() const { return rows_; }
  std::int64_t committed(int i) const { return row(i)[1]; }
  // Some training rank is past its loop (hooks cleared): no newcomer can be given state now.
  bool ending() const {
    for (int i = 0; i < rows_; ++i)
      if (row(i)[5] & kEnding) return true;
    return false;
  }
  std::int64_t committed_max() const {
    std::int64_t m = -1;
    for (int i = 0; i < rows_; ++i) m = std::max(m, row(i)[1]);
    return m;
  }
  // -1 for a process with no row: one that joined after the table was agreed (respawn).
  std::int64_t committed_of(int original_rank) const {
    for (int i = 0; i < rows_; ++i)
      if (row(i)[0] == original_rank) return row(i)[1];
    return -1;
  }
  // The raw cells, to hand the table to a process that joins the recovery (recovery/respawn.cpp).
  const std::vector<std::int64_t>& cells() const { return cells_; }
  void assign(int rows, std::vector<std::int64_t> cells) {
    FTCC_CHECK(cells.size() == row_words() * static_cast<size_t>(rows)) << "agreed table: " << cells.size()
                                                                         << " cells for " << rows << " rows";
    rows_ = rows;
    cells_ = std::move(cells);
  }
  std::int64_t notice_ns(int i) const { return row(i)[2]; }
  // The earliest start of a silence any survivor's heartbeat found, -1 = none.
  std::int64_t silence_began_ns() const {
    std::int64_t t = -1;
    for (int i = 0; i < rows_; ++i)
      if (row(i)[6] > 0) t = t < 0 ? row(i)[6] : std::min(t, row(i)[6]);
    return t;
  }
  bool confirmed_by_any(int original_rank) const {
    const size_t w = kMaskAt + static_cast<size_t>(original_rank) / 64;
    for (int i = 0; i < rows_; ++i)
      if ((row(i)[w] >> (original_rank % 64)) & 1) return true;
    return false;
  }
  // The job-level error of the lowest rank that carries one, the same on every survivor.
  std::optional<JobError> job_error() const {
    for (int i = 0; i < rows_; ++i)
      if (row(i)[3] != 0) {
        const char* text = reinterpret_cast<const char*>(row(i) + msg_at());
        return JobError(static_cast<ExitStatus>(row(i)[3]), static_cast<int>(row(i)[0]), row(i)[4],
                        std::string(text, strnlen(text, kMessageBytes)), true);
      }
    return std::nullopt;
  }

 private:
  static constexpr size_t kMaskAt = 7;
  size_t msg_at() const { return kMaskAt + mask_words_; }
  size_t row_words() const { return msg_at() + kMessageBytes / 8; }
  const std::int64_t* row(int i) const { return cells_.data() + row_words() * static_cast<size_t>(i); }

  size_t mask_words_;
  int rows_ = 0;
  std::vector<std::int64_t> cells_;
};

// A new process's way into the recovery in progress (recovery/respawn.cpp).
struct ResilientGroup::PendingJoin {
  explicit PendingJoin(std::size_t originals) : table(originals) {}
  AgreedTable table;
  RecoveryEvent event;       // as far as the survivors had it
  std::int64_t step = -1;
  std::int64_t fault_ns = -1;  // the failure (or the first notice), wall clock
  std::vector<int> before;     // the pool when the recovery began (its failed ranks: those missing now)
};

// Runs an uninterruptible call of the protocol under the ULFM-call deadline, counted for the
// heartbeat (every process of the pool makes the same calls, so the counts agree).
template <class F>
auto ResilientGroup::guarded(const char* call, FaultPhase phase, F&& f) {
  const std::uint32_t seq = ++ulfm_calls_;
  if (deadline_) deadline_->arm(call, seq);
  if (watchdog_) watchdog_->kick();
  struct Disarm {
    CallDeadline* d;
    ~Disarm() {
      if (d) d->disarm();
    }
  } disarm{deadline_.get()};
  injector_.in_phase(phase, static_cast<int>(seq));  // a stall here is this rank's, under the deadline
  if (detector_) detector_->set_progress(seq);      // entered: peers stop waiting for us
  return f();
}

}  // namespace ftcc::recovery
