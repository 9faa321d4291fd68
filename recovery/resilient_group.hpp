// recovery/resilient_group.hpp: a group of ranks that survives the loss of any of its members.
//
// The recovery loop. Every rank calls begin_step() once per step; a comm::FaultDetected
// (ProcessFailed or Revoked) from any operation goes to recover() on every survivor; the loop
// ends in all_finished(). Pick one of two forms per loop (never both: run() recovers inside).
//   ResilientGroup g(MPI_COMM_WORLD, opts);          // collective; starts the heartbeat if asked
// (a) A step that is a repeatable communication on buffers the caller keeps (docs/recovery.md):
//   for (step = 0; step < n; ++step) {
//     g.begin_step(step);                            // fault injection + progress watchdog kick
//     g.run(step, [&](comm::Communicator& c) { comm::allreduce(c, ...); });   // retried on failure
//     g.set_committed_step(step);
//   }
//   while (!g.all_finished()) {}                     // the survivors agree that all of them are done
// (b) A step with state (model, optimizer, data cursor) that the recovery hooks restore: the
//     training driver's loop (train/training_driver.hpp), written once in
//     recovery/step_loop.hpp. After a recovery the loop redoes whatever step the state names.
//   g.add_recovery_hook([&](ResilientGroup& g, const RecoveryEvent& ev) { /* re-sync on g.comm() */ });
//   run_step_loop(g, {.done = [&] { return s.step >= n; }, .step = [&] { return s.step; },
//                     .body = [&] { /* compute, communicate on g.comm(), apply */ ++s.step;
//                                   g.set_committed_step(s.step - 1); }});  // once applied
// Any other exception leaves the loop: run_job() (recovery/run_job.hpp) turns it into a
// job-level error that stops every survivor once (fail_job() below).
//
// When any operation throws comm::ProcessFailed or comm::Revoked (both comm::FaultDetected),
// recover() runs on every survivor. Every survivor makes the same sequence of calls that cannot
// be revoked (MPIX_Comm_agree, MPIX_Comm_shrink), so no two of them ever wait in different ones:
//   0. revoke the communicator, so survivors blocked elsewhere on it fail fast and join in; then
//      the entry agreement (flag 0: "I am recovering"; all_finished() enters here with 1);
//   then one or more attempts of:
//   1. revoke (again, harmless) and shrink: a new communicator of the survivors, renumbered;
//   2. exchange (original rank, last committed step, notice time, confirmed deaths, this rank's
//      job-level error if any) with our allgather, then MPIX_Comm_agree on "everyone has the
//      table" (uniform: a rank whose allgather failed contributes 0 and all of them retry);
//   3. quorum lost (below): every survivor of that side throws QuorumLost; else a job-level
//      error in the table ends the protocol: every survivor throws the same JobError
//      (recovery/job_outcome.hpp);
//   4. run the recovery hooks (re-balance, state re-sync), then MPIX_Comm_agree on "every hook
//      succeeded": a failure in a hook makes every survivor retry from 1.
// No rank is special: rank 0 may die; a single survivor goes on alone when the deaths are confirmed.
// Quorum (several hosts): a recovery goes on only if the survivors are a strict majority of the
// old group minus the deaths a survivor confirmed on its own host (from /proc); otherwise it
// throws QuorumLost on that side (it may be the minority of a network partition;
// recovery/quorum_lost.hpp; the rule: recovery/quorum_rule.hpp). On one host every death is
// confirmed, so it never triggers there.
//
// Job-level errors: fail_job() is for an error any rank in this role would hit (a checkpoint
// folder that cannot be written, a bad value only rank 0 checks, an exception): the rank revokes
// the communicator and enters the protocol carrying the error, and every survivor throws the
// same JobError, instead of excluding the rank and handing the same error to the next one.
//
// Deadlines (nothing waits forever): each wait in comm/ has comm_timeout_s; each MPIX_Comm_shrink
// and MPIX_Comm_agree has ulfm_timeout_s (recovery/call_deadline.hpp: past it, a rank leaves by
// itself unless the heartbeat shows a peer that has not reached the call yet); with
// progress_timeout > 0, a rank whose loop calls begin_step() less often than that SIGKILLs itself
// (recovery/progress_watchdog.hpp).
// Hangs: with hang_timeout > 0, an authenticated UDP heartbeat (recovery/heartbeat.hpp) fences a
// silent rank on the same host with SIGKILL, turning the hang into a failure ULFM reports.
// Exit guard: Open MPI 5's runtime does not report a process that exits with a non-zero status
// without MPI_Finalize to ULFM: the survivors would wait forever. The first ResilientGroup
// installs an exit handler that turns such an exit (MPI initialized, not finalized) into SIGKILL,
// which ULFM reports like any other death, after recording it in the job folder
// (recovery/job_outcome.hpp, which also records crashes).
// Without ULFM (comm::has_ulfm() false) construction throws comm::NotSupported saying how to get
// it, unless GroupOptions::allow_without_ulfm (then a lost rank ends the job: recover() throws
// NotSupported and fail_job() throws an unagreed JobError on this rank alone).
// Hot spares (GroupOptions::spares = S): the last S processes of `parent` train nothing at first.
// Every process is in the pool (pool(): all live processes; every ULFM call of the protocol is
// made on it, so the spares take part in every agreement); the training group (comm()) is the
// processes that hold a slot, in slot order. A spare calls wait_as_spare(), which waits in an
// agreement on the pool (polled: recovery/ulfm.hpp agree_uniform_polled) until a recovery or the
// end of the job. When a recovery loses slot holders, the survivors compute the same plan from
// the agreed survivors (recovery/heal_plan.hpp): the lowest spare takes the lowest lost slot (its
// rank in the training group, so its data shard), slots left over shrink the group, and a lost
// spare is only removed. The training group is then re-formed (MPI_Comm_split of the pool, key =
// slot) and the hooks run on it, the newcomers included (they hold committed step -1, so a hook
// that rolls the survivors forward streams them the state; RecoveryEvent::joined names them).
// The spare leaves wait_as_spare() true once it holds a slot, or false when the training ranks
// finished (run_job's last all_finished). With S = 0 there is no pool: comm() is used for all.
// Respawn (GroupOptions::respawns = N, recovery/respawn.cpp): when lost slots are left with no
// spare to fill them, the survivors start up to N new processes over the run (MPI_Comm_spawn of
// this program with its own arguments, its FTCC_* and OMPI_MCA_* environment and its working
// folder), merge them into the pool (MPI_Intercomm_merge) and hand them the group's identity, the
// addresses of every process and the recovery in progress (its agreed table); the newcomers are
// then spares of that recovery, which the heal plan places in the lost slots. A new process's
// ResilientGroup constructor does its half (it finds a parent: MPI_Comm_get_parent) and its
// wait_as_spare() finishes the recovery with the others. A spawn that fails (no room, a death
// during it) costs the respawn and the recovery goes on by shrinking. Original ranks of new
// processes follow the job's: W + S, W + S + 1, ...
// Bad options (a hang timeout too short to work, a fault for a rank the job does not have) throw
// ftcc::InvalidArgument at construction, naming the smallest value allowed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/recovery/fault_injector.hpp"
#include "ftcc/recovery/ft_comm.hpp"
#include "ftcc/recovery/call_deadline.hpp"
#include "ftcc/recovery/generation_fence.hpp"
#include "ftcc/recovery/group_environment.hpp"
#include "ftcc/recovery/heartbeat.hpp"
#include "ftcc/recovery/job_outcome.hpp"
#include "ftcc/recovery/progress_watchdog.hpp"
#include "ftcc/recovery/quorum_lost.hpp"
#include "ftcc/recovery/recovery_event.hpp"

namespace ftcc::recovery {
namespace detail {
struct WirePeer;  // recovery/group_internals.hpp
}

struct GroupOptions {
  // A rank silent for this long is fenced (0 = no heartbeat). Default 30 s; tests use ~2 s.
  std::chrono::milliseconds hang_timeout{30000};
  // Heartbeat period; 0 = hang_timeout / 8, clamped to [20 ms, 1 s].
  std::chrono::milliseconds heartbeat_period{0};
  // What finds silent ranks when hang_timeout > 0 (recovery/failure_detector.hpp): empty = the UDP
  // heartbeat (recovery/heartbeat.hpp); a test or an embedding program may hand its own.
  DetectorFactory detector;
  bool fence = true;
  // Deadline of each communication wait (0 = comm's default, FTCC_COMM_TIMEOUT_S or 300 s).
  double comm_timeout_s = 0;
  // Deadline of each MPIX_Comm_shrink / MPIX_Comm_agree (0 = FTCC_ULFM_TIMEOUT_S or 60 s; < 0 off).
  double ulfm_timeout_s = 0;
  // A rank that goes this long without begin_step() SIGKILLs itself (0 = off).
  std::chrono::milliseconds progress_timeout{0};
  // Faults to inject (recovery/fault_spec.hpp); only this rank's fire.
  std::vector<FaultSpec> faults;
  // Append one JSON line per recovery to this file (written by the new rank 0); "" = none.
  std::string event_log;
  // Print a one-line summary of each recovery on the new rank 0's stderr.
  bool verbose = true;
  // The last `spares` processes of the parent are hot spares (see the top of the file); 0 = none.
  int spares = 0;
  // New processes the group may start over the run to fill lost places (see the top); 0 = none.
  int respawns = 0;
  // Build the group even when ULFM is off (plain mpirun, or an MPI without it): fault-free runs
  // only, a lost rank ends the job. Off: construction refuses, saying how to get ULFM.
  bool allow_without_ulfm = false;
};

class ResilientGroup {
 public:
  using Hook = std::function<void(ResilientGroup&, const RecoveryEvent&)>;

  explicit ResilientGroup(MPI_Comm parent = MPI_COMM_WORLD, GroupOptions options = {});
  // A simulated process (recovery/simulation/sim_world.hpp): the same protocol on `world`, an
  // FtComm of every process of the simulation, with no MPI, heartbeat, call deadlines, watchdog,
  // job records or generation fence (options that need them are refused). confirm_gone(r)
  // answers whether original rank r's process is known to be gone (asked only for processes on
  // this process's host, as the real group asks /proc). host_of[r]: the simulated host of
  // original rank r (empty: one host; with respawns, the new processes' ranks too), which the
  // quorum rule counts. `respawned`: a process the simulation started for a respawn, `world` the
  // communicator merged with the survivors that started it (FtComm::spawn_merged).
  struct Simulated {
    std::unique_ptr<FtComm> world;
    std::function<bool(int original_rank)> confirm_gone;
    std::uint64_t job_id = 1;
    std::vector<int> host_of;
    bool respawned = false;
  };
  ResilientGroup(Simulated sim, GroupOptions options);
  ~ResilientGroup();
  ResilientGroup(const ResilientGroup&) = delete;
  ResilientGroup& operator=(const ResilientGroup&) = delete;

  // The training group. A spare has none (is_spare()): rank() is -1 and size() 0 there.
  comm::Communicator& comm();
  int rank() const { return comm_ ? comm_->rank() : -1; }
  int size() const { return comm_ ? comm_->size() : 0; }
  bool is_spare() const { return !comm_; }
  // The size the training group started with (the processes of the parent minus the spares).
  int initial_size() const { return initial_training_; }
  // Every live process, spares included (the training group itself when there are no spares).
  comm::Communicator& pool();
  // The same two groups as the protocol sees them (recovery/ft_comm.hpp): a simulated rank's
  // program talks through these, having no comm::Communicator.
  FtComm& ft_comm();
  FtComm& ft_pool() { return pool_ ? *pool_ : ft_comm(); }
  const std::vector<int>& pool_members() const { return pool_ ? pool_members_ : members_; }
  int spares_left() const;
  int respawns_left() const { return respawns_left_; }
  // Processes started by respawns that were lost since (their original ranks are past the job's).
  int new_processes_lost() const;
  // True in a process started by a respawn (MPI_Comm_get_parent found the job that started it).
  bool respawned() const { return respawned_; }
  // Whether this process prints and records the job's outcome: the training group's rank 0, or
  // the pool's rank 0 when no process holding training state survives.
  bool reports() const;
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
  // the new group; a FaultDetected thrown from a hook restarts the protocol; any other exception
  // becomes a job-level error (every survivor throws JobError). Hooks capture the caller's
  // state: clear them before that state goes away (run_job() does).
  void add_recovery_hook(Hook hook) { hooks_.push_back(std::move(hook)); }
  // A hook that streamed state to other ranks says how much and how long (this rank's view); the
  // event of the recovery carries it (transfer_bytes, transfer_ms).
  void record_state_transfer(std::int64_t bytes, double ms) {
    transfer_bytes_ += bytes;
    transfer_ms_ += ms;
  }
  void clear_recovery_hooks() { hooks_.clear(); }

  // This rank hit an error that any rank in its role would hit: stop the job, once. Revokes the
  // communicator and runs the protocol carrying (status, message); every survivor (this one
  // included) then throws the same JobError naming this rank. See the top of the file.
  [[noreturn]] void fail_job(ExitStatus status, const std::string& message);

  // This rank must take no further part in the job (the others voted its state corrupt, or
  // excluded it as silent): prints "ftcc: rank R <why> at step S" on stderr, records it as the way
  // this process left (job_record::left), and SIGKILLs itself, which ULFM reports to the others as
  // a failure like any other (so hot spares and respawns replace it). Never returns.
  [[noreturn]] void leave_excluded(const std::string& why);

  // Call when this rank's loop is done. Returns true when every survivor's is (uniformly, by
  // MPIX_Comm_agree); false after a recovery ran because some rank was not done or a rank died:
  // then re-check the loop condition (the hooks may have rolled this rank forward) and loop.
  // The ranks that finished the last step of a loop and the ranks whose last step failed meet
  // here instead of waiting in different calls.
  // `last`: run_job's final call (a spare waiting in wait_as_spare() leaves only on that one).
  bool all_finished(bool last = false);

  // A spare's wait (see the top of the file): true once this process holds a slot in the
  // training group (the recovery hooks have run here too: the state is the group's), false when
  // the job finished without needing it. Exceptions as recover(). Pre: is_spare().
  bool wait_as_spare();

  // Runs fn(comm) for `step` of a loop in which every rank calls run() once per step, in order.
  // After a fault it recovers and reruns fn on the survivors, unless a survivor had already
  // committed `step` (set_committed_step): ranks can be one step apart when a failure lands (a
  // ring allreduce completes on some ranks before others), and the ranks ahead will not run
  // this step again. Then it returns false without rerunning: the group finished this step
  // without this rank's last attempt, and the caller continues with step + 1 (taking the step's
  // state from a peer in a recovery hook if it has any; train/training_driver.cpp does). Returns true
  // when fn completed here. Exceptions other than FaultDetected propagate.
  template <class F>
  bool run(std::int64_t step, F&& fn) {
    for (;;) {
      try {
        fn(comm());
        return true;
      } catch (const comm::FaultDetected& e) {
        if (recover(step, e.what()).committed_max >= step) return false;
      }
    }
  }

  // The recovery protocol (see top of file). Every survivor must call it, from the catch of the
  // loop's form (b) (run() calls it in form (a)); returns the event. Throws QuorumLost or
  // JobError where the protocol says so, the same on every survivor.
  const RecoveryEvent& recover(std::int64_t step, const std::string& cause);
  const std::vector<RecoveryEvent>& events() const { return events_; }
  const HeartbeatStats heartbeat_stats() const;

  // Call right before writing a file the job trusts (a checkpoint's commit, the outcome): throws
  // Superseded (recovery/generation_fence.hpp) when the job has gone on without this process (it
  // was stopped and excluded, and woke up), so a stale copy never overwrites the job's files.
  // `what` names the write for the message ("writing checkpoint 800"). No-op without a job folder.
  void check_current(const std::string& what) const;

 private:
  void bootstrap(MPI_Comm parent);
  void form_pool();  // slots at start; with spares or respawns, the pool and the training group
  void install_fault_hook();
  // Runs an uninterruptible ULFM call under the deadline, counting it for the heartbeat.
  template <class F>
  auto guarded(const char* call, FaultPhase phase, F&& f);

  struct PendingError {
    ExitStatus status;
    std::string message;
    std::int64_t step;
  };

  // The protocol at the top of the file, one function per step (membership_protocol.cpp). A step
  // that returns false did so on every survivor (its agreement says so): retry from step 1.
  struct RecoveryClock;  // one recovery's timing: detect, revoke, shrink, agree, resync, total
  class AgreedTable;     // step 2's table, one row per survivor
  struct PendingJoin;    // a new process: the recovery it joins, as the survivors handed it over
  void revoke_quietly();   // the training group and the pool
  void revoke_training();  // the training group only (a spare's pending agreement stays valid)
  void enter_protocol();  // 0: revoke + entry agreement (flag 0)
  const RecoveryEvent& recover_attempts(std::int64_t step, const std::string& cause, RecoveryClock clock,
                                        PendingJoin* join = nullptr);
  bool shrink_group(RecoveryClock& clock, RecoveryEvent& ev);  // 1
  bool agree_on_table(const std::vector<int>& before, RecoveryClock& clock, AgreedTable& table,
                      RecoveryEvent& ev);  // 2
  void describe_new_group(const std::vector<int>& before, const AgreedTable& table, RecoveryClock& clock,
                          RecoveryEvent& ev);
  void check_quorum(const RecoveryEvent& ev, const AgreedTable& table);  // 3 (recovery/quorum_rule.hpp)
  bool heal(RecoveryClock& clock, RecoveryEvent& ev, const AgreedTable& table, bool may_respawn);  // 3b: spares take lost slots
  void describe_training_group(const AgreedTable& table, RecoveryEvent& ev);  // survivors, committed steps
  void form_training_group();  // MPI_Comm_split of the pool by slots_ (collective on the pool)
  const std::vector<int>& ulfm_members() const { return pool_members(); }
  // Respawn (recovery/respawn.cpp).
  // Original ranks a job can ever have (processes at start + respawns): the agreed table's size.
  std::size_t max_originals() const;
  // Starts k processes, merges them into the pool and hands them the recovery in progress; false
  // (pool unchanged, the respawns spent) when it failed on any survivor.
  bool respawn(int k, RecoveryClock& clock, RecoveryEvent& ev, const AgreedTable& table);
  // The hand-over to the new processes on the merged communicator m; every process's record.
  std::vector<detail::WirePeer> hand_over(FtComm& m, const RecoveryEvent& ev, const RecoveryClock& clock,
                                          const AgreedTable& table, int old_pool);
  // The constructor's half in a new process, on the communicator merged with the job that started
  // it (a simulated one: no heartbeat, services or job records; its host from sim_host_of_).
  void join_as_respawned(std::unique_ptr<FtComm> merged, bool simulated);
  PeerAddress simulated_address(int original_rank) const;
  void start_services();  // starts the heartbeat, the deadlines and the records (bootstrap's end)
  // Makes the heartbeat (when on), bound for one host or several; returns this process's record.
  detail::WirePeer create_heartbeat(bool single_host);
  bool run_hooks(std::int64_t step, int attempt, RecoveryClock& clock, RecoveryEvent& ev);  // 4
  // One agreement on the pool: did every survivor succeed at the step just made? The same answer
  // everywhere (a failure noticed during it counts as "no").
  bool agree_on(bool mine);
  const RecoveryEvent& publish(RecoveryEvent ev);
  void record_group();  // the generation fence's advance (Superseded: superseded_ set, rethrown)  // events(), the summary line, the event log
  std::vector<int> lost_since(const std::vector<int>& before) const;

  GroupOptions opt_;
  GroupEnvironment env_;                       // read once, at construction (the MPI one)
  std::unique_ptr<FtComm> comm_;               // the training group (null on a spare)
  std::vector<int> members_;                   // original rank of each training rank
  std::unique_ptr<FtComm> pool_;               // every live process (null without spares and respawns)
  std::vector<int> pool_members_;              // original rank of each pool rank
  std::vector<int> slots_;                     // slot of each original rank (recovery/heal_plan.hpp)
  bool left_as_spare_ = false;                 // a spare that saw the job finish
  std::vector<int> holders_;                   // processes holding the training state (after the last recovery)
  std::int64_t spare_waits_ = 0;               // waits begun as a spare (fault injection)
  int respawns_left_ = 0;
  std::size_t initial_pool_ = 0;  // processes at start (training ranks + spares)
  int initial_training_ = 0;
  bool respawned_ = false;
  std::unique_ptr<PendingJoin> join_;          // set in a new process until wait_as_spare() joins
  Secret secret_{};                            // the heartbeat's, handed to new processes
  std::vector<int> sim_host_of_;               // a simulated process: the host of each original rank
  std::int64_t transfer_bytes_ = 0;            // record_state_transfer() in this attempt's hooks
  double transfer_ms_ = 0;
  std::vector<PeerAddress> peers_;
  int my_original_rank_ = -1;
  std::uint64_t job_id_ = 0;
  std::string event_dir_;
  std::int64_t committed_step_ = -1;
  std::atomic<std::int64_t> step_{-1};         // begin_step's; read by the heartbeat thread
  // When the earliest silence this rank's heartbeat found (since the last recovery) began, wall
  // ns, 0 = none; written by the heartbeat thread, read by the recovery (detect_ms).
  std::atomic<std::int64_t> silence_began_ns_{0};
  bool quorum_lost_ = false;
  mutable bool superseded_ = false;            // a Superseded was thrown here (see the destructor)
  GenerationFence fence_{job_record::dir()};  // the job's current group on disk
  FaultInjector injector_;
  std::unique_ptr<FailureDetector> detector_;  // the heartbeat, or GroupOptions::detector's
  std::vector<Hook> hooks_;
  std::vector<RecoveryEvent> events_;
  std::optional<PendingError> pending_error_;
  std::uint32_t ulfm_calls_ = 0;  // MPIX_Comm_shrink/agree calls entered (same on every survivor)
  std::unique_ptr<CallDeadline> deadline_;
  std::unique_ptr<ProgressWatchdog> watchdog_;
  // Whether original rank r's process is gone (confirmed deaths: quorum); /proc unless simulated.
  std::function<bool(int original_rank, std::chrono::steady_clock::time_point by)> confirm_gone_;
  bool fault_tolerant_ = true;  // ULFM on (comm::has_ulfm()), or simulated
};

}  // namespace ftcc::recovery
