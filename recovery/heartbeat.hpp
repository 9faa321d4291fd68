// recovery/heartbeat.hpp: out-of-band liveness of the job's ranks, independent of MPI progress.
//
// Why: ULFM only reports processes that *died*. A rank that is alive but stopped (SIGSTOP, a
// stuck kernel) makes every collective and even MPIX_Comm_shrink/agree wait forever. Each rank
// runs this on its own thread with its own UDP socket (Boost.Asio): every `period` it sends a
// heartbeat to every peer, and it watches every peer. A peer silent for `timeout` is
// *suspected*; the lowest-ranked non-suspected rank on the suspect's host *fences* it (SIGKILL
// of the recorded pid, after checking the pid's start time so a recycled pid is never hit).
// ULFM then reports the fenced rank as failed and the normal recovery runs.
//
// Guarantees and limits:
//  - A slow but alive rank keeps heartbeating (separate thread), so it is never fenced for
//    slowness; a SIGSTOPped one stops heartbeating with the rest of the process.
//  - Only ranks on the same host fence (kill() needs the same kernel). A suspect alone on its
//    host is reported, not fenced; a host lost as a whole is found by the MPI runtime's daemons.
//  - Authentication: every datagram carries an HMAC-SHA256 over (job id, rank, sequence) keyed
//    by a per-job random secret shared through MPI at start; datagrams of the wrong size, magic,
//    job, MAC, rank, or a non-increasing sequence (replay) are dropped and counted. The socket
//    binds only to the address the job uses (127.0.0.1 when all ranks share one host).
#pragma once

#include <array>
#include <atomic>
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
  std::string host;          // hostname
  std::string ip;            // address its heartbeat socket is bound to
  std::uint16_t port = 0;
  int pid = 0;
  std::uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)
};

struct HeartbeatOptions {
  std::chrono::milliseconds period{250};
  std::chrono::milliseconds timeout{30000};
  bool fence = true;
};

struct HeartbeatStats {
  std::uint64_t sent = 0, accepted = 0, rejected = 0, suspected = 0, fenced = 0;
};

// A suspicion: which peer, how long it was silent, and whether this rank fenced it.
using SuspectCallback = std::function<void(const PeerAddress& peer, double silent_s, bool fenced_by_me)>;

class Heartbeat {
 public:
  // Opens the socket on bind_ip (port chosen by the OS). Nothing is sent before start().
  Heartbeat(int my_rank, const std::string& bind_ip, HeartbeatOptions options);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // This rank's address, to be exchanged with every peer before start().
  PeerAddress local_address() const;
  // Starts the thread: heartbeats to and watches every peer but self.
  void start(const std::vector<PeerAddress>& peers, const Secret& secret, std::uint64_t job_id);
  void stop();
  // Stop watching (and heartbeating to) a rank that is known to have failed.
  void remove(int rank);
  // Start watching (and heartbeating to) a process that joined the job (recovery/respawn.cpp).
  void add(const PeerAddress& peer);
  void set_on_suspect(SuspectCallback cb);
  // Progress carried by every heartbeat: the number of ULFM calls this rank has entered
  // (recovery/call_deadline.hpp). peer_behind(n) is a watched, unsuspected peer whose last
  // heartbeat reported fewer than n, or -1.
  void set_progress(std::uint32_t entered_calls);
  int peer_behind(std::uint32_t entered_calls) const;
  HeartbeatStats stats() const;

  // Fresh random secret (getrandom); rank 0 makes it, the others receive it through MPI.
  static Secret random_secret();
  // Start time of a live process (/proc/<pid>/stat field 22), 0 if unknown.
  static std::uint64_t process_start_time(int pid);
  // True when the process recorded as (pid, start_time) on this host is dead: the kernel says
  // there is no such pid, another process has it, or it is a zombie. False when alive (stopped
  // included) or when /proc cannot be read (that confirms nothing).
  static bool process_gone(int pid, std::uint64_t start_time);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftcc::recovery
