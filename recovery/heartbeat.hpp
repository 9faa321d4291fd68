// recovery/heartbeat.hpp: out-of-band liveness of the job's ranks, independent of MPI progress.
//
// Why: ULFM only reports processes that *died*, and across hosts only when its own detector has
// walked its ring (one timeout per silent rank) or the runtime's daemons notice (they have no
// heartbeat). A rank that is alive but stopped (SIGSTOP, a stuck kernel) makes every collective,
// and even MPIX_Comm_shrink/agree, wait forever. Each rank runs this on its own thread with its own
// UDP socket (Boost.Asio), so a long compute step never looks like a failure.
//
// Topology (recovery/heartbeat_topology.hpp): ranks beat to their host's two speakers, speakers
// beat to their host's ranks and to the speakers of `fanout` hosts on either side of a ring of
// hosts, which they watch as a whole. A silent rank of this host, or a silent host, is *suspected*
// after `timeout`; the news goes at once to every rank (two hops) and rides on every later
// heartbeat, so a lost host is known everywhere within the timeout plus one period.
//
// What a suspicion leads to (the owner's on_suspect callback decides the rest):
//  - Fencing: the lowest live (unsuspected) rank on the suspect's host SIGKILLs it (after checking
//    the pid's start time, so a recycled pid is never hit). The choice is made again every period
//    for every suspect on the host still alive: when the fencer is itself suspected (two ranks
//    stopped), the next live rank fences both. Fencing converges while one rank of the host lives. Same host = same host_identity(): hostname, boot
//    id and pid/net namespaces, so containers sharing a hostname are told apart.
//  - Exclusion: suspicion is final. A suspected rank that speaks again (it was stopped) gets a
//    reply listing it; a rank that reads itself in the list of a sender it does not suspect itself
//    tells its host-mates and calls on_excluded (the owner stops the process: self-fencing). Lists
//    from senders this rank suspects are ignored, so a healed minority's stale suspicions never
//    exclude the majority; for the same reason a cut-off rank that suspected the others ignores
//    their replies after the link heals: the quorum rule of the recovery stops it instead.
//    Limit: a link lost between two hosts only (both still reach the others) makes each suspect
//    the other, and the rest accept both suspicions: both hosts are excluded (safe, not minimal).
//  - After a stall of this process (its heartbeat thread did not run for timeout/2: SIGSTOP, a
//    paused VM), nobody is suspected for one timeout: the others get the time to say whether they
//    excluded this rank.
//
// Authentication: every datagram carries an HMAC-SHA256 over its contents (job id, rank, sequence,
// progress, suspects) keyed by a per-job random secret shared through MPI at start; datagrams of the
// wrong size, magic, job, MAC, rank, or a non-increasing sequence (replay) are dropped and counted.
// The socket binds only to the address the job uses (127.0.0.1 when all ranks share one host).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ftcc/recovery/failure_detector.hpp"

namespace ftcc::recovery {

// The detector of real jobs (recovery/failure_detector.hpp states the contract every detector keeps).
class Heartbeat final : public FailureDetector {
 public:
  // Opens the socket on bind_ip (port chosen by the OS). Nothing is sent before start().
  Heartbeat(int my_rank, const std::string& bind_ip, HeartbeatOptions options);
  ~Heartbeat() override;
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // This rank's address, to be exchanged with every peer before start().
  PeerAddress local_address() const override;
  // Starts the thread: heartbeats to and watches every peer but self.
  void start(const std::vector<PeerAddress>& peers, const Secret& secret, std::uint64_t job_id) override;
  void stop() override;
  // A rank known to have failed (or excluded by the recovery): suspected from now on, quietly
  // (no on_suspect); its news spreads with the next heartbeats.
  void remove(int rank) override;
  // Start watching (and heartbeating to) a process that joined the job (recovery/respawn.cpp).
  void add(const PeerAddress& peer) override;
  void set_on_suspect(SuspectCallback cb) override;
  void set_on_excluded(ExcludedCallback cb) override;
  // Ranks suspected so far (monotone).
  std::vector<int> suspected() const override;
  // Progress carried by every heartbeat: the number of ULFM calls this rank has entered
  // (recovery/call_deadline.hpp). peer_behind(n) is an unsuspected rank that, as far as this
  // rank knows, has entered fewer than n (speakers gather their host's counts and the other
  // hosts' minima; a few periods stale at most), or -1.
  void set_progress(std::uint32_t entered_calls) override;
  int peer_behind(std::uint32_t entered_calls) const override;
  HeartbeatStats stats() const override;

  // Fresh random secret (getrandom); rank 0 makes it, the others receive it through MPI.
  static Secret random_secret();
  // This host's identity, comm::host_identity() (comm/host_identity.hpp): "hostname/<hash of boot
  // id, pid and network namespaces>". Two ranks can fence each other (kill) only when it is equal.
  static std::string host_identity();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftcc::recovery
