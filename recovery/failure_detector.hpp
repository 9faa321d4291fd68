// recovery/failure_detector.hpp: the seam between a resilient group and whatever tells it which
// ranks are silent, dead or stopped. Real jobs use the UDP heartbeat (recovery/heartbeat.hpp); a
// test or a simulation hands its own through GroupOptions::detector.
//
// Contract, for any detector:
//  - local_address() is this process's address and identity; the group exchanges it with every
//    peer before start(peers, secret, job_id), which begins watching every peer but self.
//  - A peer found silent (or reported so) is *suspected*; suspicion is final and monotone
//    (suspected() only grows). on_suspect is called once per suspect, on the detector's own thread:
//    the callback may not use MPI (the group tells the MPI runtime through PMIx and prints a line).
//  - on_excluded(by) is called at most once, when a peer the detector trusts says this rank was
//    suspected: the group then stops this process (self-fencing).
//  - remove(r): r failed or was excluded by a recovery; suspect it quietly from now on (no
//    on_suspect). add(p): watch a process that joined (a spare or a respawned rank).
//  - set_progress(n) publishes the number of ULFM calls this rank has entered; peer_behind(n) names
//    an unsuspected peer known to have entered fewer than n, or -1 (the call deadline's verdict,
//    recovery/call_deadline.hpp). A detector that cannot tell returns -1.
//  - stop() ends the thread; after it no callback runs. The destructor stops.
// Nothing here throws on a network fault: a detector that cannot reach a peer suspects it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ftcc::recovery {

using Secret = std::array<std::uint8_t, 32>;

// Where a rank can be reached and how it is identified for fencing.
struct PeerAddress {
  int rank = -1;             // rank in the job's original numbering
  std::string host;          // hostname (for messages)
  std::string host_id;       // Heartbeat::host_identity() of its host (for fencing and the quorum)
  std::string ip;            // address its heartbeat socket is bound to
  std::uint16_t port = 0;
  int pid = 0;
  std::uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)
  std::string mpi_nspace;        // its name in the MPI runtime (recovery/mpi_failure_notice.hpp)
  std::uint32_t mpi_rank = 0;
};

struct HeartbeatOptions {
  std::chrono::milliseconds period{250};
  std::chrono::milliseconds timeout{30000};
  bool fence = true;
  int fanout = 2;  // hosts watched on either side of the ring (recovery/heartbeat_topology.hpp)
  std::string host_id;  // empty: host_identity(); tests set it to simulate hosts in one process
};

struct HeartbeatStats {
  std::uint64_t sent = 0, accepted = 0, rejected = 0;
  std::uint64_t suspected = 0;  // ranks this rank learned to suspect (its own finding or news)
  std::uint64_t detected = 0;   // of which this rank found silent itself
  std::uint64_t fenced = 0;     // processes this rank SIGKILLed
  std::uint64_t excluded_replies = 0;  // replies to suspected ranks that spoke again
  std::uint64_t stalls = 0;     // times this process's heartbeat thread was found to have stalled
};

// A suspicion: which peer, how long this rank had not heard it, whether this rank fenced it, and
// who found it silent (this rank, or the rank whose news told it).
struct Suspicion {
  PeerAddress peer;
  double silent_s = 0;
  bool fenced_by_me = false;
  int reported_by = -1;
};
using SuspectCallback = std::function<void(const Suspicion&)>;
// This rank was excluded: `by` listed it as suspected (called once, on the heartbeat thread).
using ExcludedCallback = std::function<void(int by)>;

class FailureDetector {
 public:
  virtual ~FailureDetector() = default;
  virtual PeerAddress local_address() const = 0;
  virtual void start(const std::vector<PeerAddress>& peers, const Secret& secret, std::uint64_t job_id) = 0;
  virtual void stop() = 0;
  virtual void remove(int rank) = 0;
  virtual void add(const PeerAddress& peer) = 0;
  virtual void set_on_suspect(SuspectCallback cb) = 0;
  virtual void set_on_excluded(ExcludedCallback cb) = 0;
  virtual std::vector<int> suspected() const = 0;
  virtual void set_progress(std::uint32_t entered_calls) = 0;
  virtual int peer_behind(std::uint32_t entered_calls) const = 0;
  virtual HeartbeatStats stats() const = 0;
};

// Makes the detector of original rank `rank`, bound to `bind_ip` (the address the job uses), with
// the group's timeout and period in `options`. Called once, while the group is built.
using DetectorFactory =
    std::function<std::unique_ptr<FailureDetector>(int rank, const std::string& bind_ip, const HeartbeatOptions& options)>;

}  // namespace ftcc::recovery
