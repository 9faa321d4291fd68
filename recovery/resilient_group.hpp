// recovery/resilient_group.hpp: a group of ranks that survives the loss of any of its members.
//
//   ResilientGroup g(MPI_COMM_WORLD, opts);          // collective; starts the heartbeat if asked
//   for (step = 0; step < n; ++step) {
//     g.begin_step(step);                            // fault injection + watchdog kick
//     g.run(step, [&](comm::Communicator& c) { comm::allreduce(c, ...); });   // retried on failure
//     g.set_committed_step(step);
//   }
//
// When any operation throws comm::ProcessFailed or comm::Revoked (both comm::FaultDetected),
// recover() runs on every survivor:
//   1. revoke the communicator, so survivors blocked elsewhere on it fail fast and join in;
//   2. shrink it: a new communicator of the survivors, ranks renumbered in order;
//   3. agree: the survivors exchange (original rank, last committed step, notice time) over
//      the new group with our allgather, then confirm with MPIX_Comm_agree (fault tolerant);
//      failed ranks are those of the old group missing from the new one;
//   4. install the new communicator and run the recovery hooks (re-balance, state re-sync).
// A failure during 1-4 (including in a hook) restarts the protocol on the further-shrunk group;
// the event then reports attempts > 1 and the union of the failed ranks. No rank is special:
// rank 0 may die; a single survivor goes on alone when the deaths are confirmed.
// Quorum (several hosts): a recovery goes on only if the survivors are a strict majority of the
// old group minus the deaths a survivor confirmed on its own host (from /proc); otherwise it
// throws QuorumLost on that side (it may be the minority of a network partition;
// recovery/quorum_lost.hpp). On one host every death is confirmed, so it never triggers there.
//
// Hangs: with hang_timeout > 0, an authenticated UDP heartbeat (recovery/heartbeat.hpp) fences a
// silent rank on the same host with SIGKILL, turning the hang into a failure ULFM reports.
// Exit guard: Open MPI 5's runtime does not report a process that exits with a non-zero status
// without MPI_Finalize to ULFM: the survivors would wait forever. The first ResilientGroup
// installs an atexit handler that turns such an exit (MPI initialized, not finalized) into
// SIGKILL, which ULFM reports like any other death.
// Without ULFM (comm::has_ulfm() false) construction works but recover() throws NotSupported.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/errors.hpp"
#include "recovery/fault_injector.hpp"
#include "recovery/heartbeat.hpp"
#include "recovery/quorum_lost.hpp"
#include "recovery/recovery_event.hpp"

namespace ftcc::recovery {

struct GroupOptions {
  // A rank silent for this long is fenced (0 = no heartbeat). Default 30 s; tests use ~2 s.
  std::chrono::milliseconds hang_timeout{30000};
  // Heartbeat period; 0 = hang_timeout / 8, clamped to [20 ms, 1 s].
  std::chrono::milliseconds heartbeat_period{0};
  bool fence = true;
  // Deadline of each communication wait (0 = comm's default, FTCC_COMM_TIMEOUT_S or 300 s).
  double comm_timeout_s = 0;
  // Faults to inject (recovery/fault_spec.hpp); only this rank's fire.
  std::vector<FaultSpec> faults;
  // Append one JSON line per recovery to this file (written by the new rank 0); "" = none.
  std::string event_log;
  // Print a one-line summary of each recovery on the new rank 0's stderr.
  bool verbose = true;
};

class ResilientGroup {
 public:
  using Hook = std::function<void(ResilientGroup&, const RecoveryEvent&)>;

  explicit ResilientGroup(MPI_Comm parent = MPI_COMM_WORLD, GroupOptions options = {});
  ~ResilientGroup();
  ResilientGroup(const ResilientGroup&) = delete;
  ResilientGroup& operator=(const ResilientGroup&) = delete;

  comm::Communicator& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  int initial_size() const { return static_cast<int>(peers_.size()); }
  int original_rank() const { return my_original_rank_; }
  // Original rank of each current rank (index = current rank).
  const std::vector<int>& members() const { return members_; }
  // Where original rank r runs (host, pid), as exchanged at start.
  const PeerAddress& peer(int original_rank) const { return peers_.at(static_cast<size_t>(original_rank)); }
  std::uint64_t job_id() const { return job_id_; }
  // A per-job scratch folder on this host (fault timestamps); removed by the destructor of rank 0.
  const std::string& event_dir() const { return event_dir_; }

  FaultInjector& injector() { return injector_; }
  // Start of a step: fault injection (phase=step) and the watchdog's progress mark.
  void begin_step(std::int64_t step);
  // The last step this rank fully applied; reported in the agreement of the next recovery.
  void set_committed_step(std::int64_t step) { committed_step_ = step; }
  std::int64_t committed_step() const { return committed_step_; }

  // Hooks run after each new group is installed, in the order added. They may communicate on
  // the new group; a FaultDetected thrown from a hook restarts the protocol.
  void add_recovery_hook(Hook hook) { hooks_.push_back(std::move(hook)); }

  // Runs fn(comm) for `step` of a loop in which every rank calls run() once per step, in order.
  // After a fault it recovers and reruns fn on the survivors, unless a survivor had already
  // committed `step` (set_committed_step): ranks can be one step apart when a failure lands (a
  // ring allreduce completes on some ranks before others), and the ranks ahead will not run
  // this step again. Then it returns false without rerunning: the group finished this step
  // without this rank's last attempt, and the caller continues with step + 1 (taking the step's
  // state from a peer in a recovery hook if it has any; train/dp_trainer.cpp does). Returns true
  // when fn completed here. Exceptions other than FaultDetected propagate.
  template <class F>
  bool run(std::int64_t step, F&& fn) {
    for (;;) {
      try {
        fn(*comm_);
        return true;
      } catch (const comm::FaultDetected& e) {
        if (recover(step, e.what()).committed_max >= step) return false;
      }
    }
  }

  // The recovery protocol (see top of file). Every survivor must call it; returns the event.
  const RecoveryEvent& recover(std::int64_t step, const std::string& cause);
  const std::vector<RecoveryEvent>& events() const { return events_; }
  const HeartbeatStats heartbeat_stats() const;

 private:
  void bootstrap(MPI_Comm parent);
  void install_fault_hook();

  GroupOptions opt_;
  std::unique_ptr<comm::Communicator> comm_;
  std::vector<int> members_;
  std::vector<PeerAddress> peers_;
  int my_original_rank_ = -1;
  std::uint64_t job_id_ = 0;
  std::string event_dir_;
  std::int64_t committed_step_ = -1;
  std::int64_t step_ = -1;
  bool quorum_lost_ = false;
  FaultInjector injector_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::vector<Hook> hooks_;
  std::vector<RecoveryEvent> events_;
};

}  // namespace ftcc::recovery
