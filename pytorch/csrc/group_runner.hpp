// pytorch/csrc/group_runner.hpp: one process group's operations, in the order they were called.
//
// Each c10d group (the default one, every new_group, every mesh dimension) has a runner: a queue,
// a worker thread, and the group's communicator. Operations run in submission order, on the
// worker, or on the thread that waits for one that has not started yet (help(): a synchronous
// call then costs no thread switch). Groups run independently of each other, as gloo's and NCCL's
// do, so two groups whose calls interleave differently on different ranks do not wait on each
// other.
//
// Failures. When an operation meets a dead or revoked peer (comm::FaultDetected) the executing
// thread puts it back at the front of the queue, asks the runtime for a recovery and lets go. The
// runtime (runtime.hpp) pauses every runner whose group lost a member, recovers the job once
// (ULFM: revoke, shrink, agree on who failed), gives each of them its survivors' communicator and
// resumes them. The worker then reconciles the calls in flight (recovery/inflight_reconcile.hpp):
//   - transparent (the default): a call some survivor completed is answered with that survivor's
//     result, a call nobody completed runs again on the survivors; the group's rank and size are
//     the survivors' from then on (on_resize), and nothing is raised;
//   - otherwise (point-to-point in flight, a call that cannot run on fewer ranks, a result that
//     differs per rank, or set_transparent(false)): every call made for the old generation raises
//     the same RankFailure on every survivor, and dist.shrink_group continues on the next one.
// The decision is the same on every survivor.
//
// Retention: the result of every collective since the last completed fully dependent one is kept
// (a reference for the results the caller got as new tensors, DDP's buckets; a private copy is
// the result itself otherwise), which is what a survivor that did not complete it may need.
//
// Thread safety: every public member may be called from any thread, except those marked
// "runtime only" (the runtime's sentinel thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "failure_verdict.hpp"
#include "group_failure.hpp"
#include "op_task.hpp"

namespace ftcc::comm {
class Communicator;
}

namespace ftcc::torch_backend {

class Runtime;

class GroupRunner {
 public:
  // members: the original (world) rank of each group rank; comm: the group's communicator (the
  // runtime's for the default group, else owned). rebuildable: the runtime re-forms it from the
  // survivors after a recovery (every group but those made by reconfigure(), whose calls raise
  // RankFailure until the program reconfigures them).
  GroupRunner(Runtime& rt, std::string name, std::vector<int> members, comm::Communicator* comm,
              std::unique_ptr<comm::Communicator> owned, bool rebuildable);
  ~GroupRunner();
  GroupRunner(const GroupRunner&) = delete;
  GroupRunner& operator=(const GroupRunner&) = delete;

  const std::string& name() const { return name_; }
  bool rebuildable() const { return rebuildable_; }

  // ---- calls ----------------------------------------------------------------------------------
  // Queues t (collectives get the next sequence number) and returns its id. A call whose
  // generation ended in a failure is answered with it when its turn comes.
  std::uint64_t submit(OpTask t);
  // The caller waits for task `id`: run the queue up to it here if nobody runs it (see the top).
  void help(std::uint64_t id);
  static constexpr std::chrono::microseconds kInlineGrace{100};

  // ---- state ----------------------------------------------------------------------------------
  int generation() const;
  // The generation a backend made for `generation` acts in now: itself, or (after transparent
  // recoveries) the current one.
  int effective_generation(int generation) const;
  std::vector<int> members() const;  // current, original ranks
  int rank() const;                  // this process's current rank in the group
  int size() const;
  std::optional<Failure> failure(int generation) const;
  bool transparent() const { return transparent_.load(); }
  void set_transparent(bool on) { transparent_.store(on); }
  std::vector<RecoveryRecord> recoveries() const;
  std::int64_t ddp_steps_started() const { return ddp_started_.load(); }
  std::int64_t ddp_steps_completed() const { return ddp_completed_.load(); }
  // Called (on the reconciling thread) when the group's rank and size change transparently; one
  // owner at a time (the backend of the newest generation), cleared by that owner only.
  void set_on_resize(const void* owner, std::function<void(int rank, int size)> f);
  void clear_on_resize(const void* owner);

  // ---- the runtime only -----------------------------------------------------------------------
  comm::Communicator* communicator() { return comm_; }
  // Starts nothing more and waits until no thread runs this group's tasks (an operation in
  // progress fails once the communicator is revoked: revoke_first for the groups the runtime does
  // not revoke itself). In-flight point-to-point requests are abandoned (they hold the old
  // communicator); they are answered when the group resumes.
  void pause(bool revoke_first);
  bool paused() const;
  bool stopped() const;  // stop() ran
  // After a recovery that touched this group: its new communicator (owned, or the runtime's),
  // the agreed failed processes and the survivors. The worker reconciles before anything else.
  struct Resume {
    int epoch = 0;
    comm::Communicator* comm = nullptr;
    std::unique_ptr<comm::Communicator> owned;
    std::vector<int> failed_original;
    std::vector<int> members;  // survivors, original ranks, in new-rank order
    std::chrono::steady_clock::time_point noticed;
  };
  void resume(Resume r);
  // The job cannot go on: every call queued, in flight or made later is answered with f.
  void fail_all(const Failure& f);
  // Ends the worker; calls still queued are answered with an error (the program is ending).
  void stop(const std::string& why);
  // Frees an owned communicator (before MPI_Finalize).
  void release_communicator();

 private:
  struct Retained {
    std::int64_t seq;
    at::Tensor result;
    bool shareable;
  };
  struct InFlight {
    OpTask task;
    OpTask::Poll poll;
  };
  void loop();
  // Runs queued tasks on this thread while allowed (until task `until` ran, when nonzero).
  // Called with `lock` held and running_ taken; returns with it held.
  void drain(std::unique_lock<std::mutex>& lock, std::uint64_t until);
  void execute(OpTask& t);
  void finish_collective(OpTask& t, const at::Tensor& result);
  void on_fault(OpTask& t, const std::string& cause);
  // The error a caller gets for a call that failed with `e` but no fault (classify's verdict
  // `v`): the call's own error when the call was wrong; otherwise the group is marked fatal
  // (a deadline, a broken communicator) and the fatal error is returned. One rule for calls run
  // here and point-to-point calls polled in flight.
  std::exception_ptr error_after(const Verdict& v, std::exception_ptr e);
  void poll_in_flight();
  void reconcile(Resume r);
  void answer(OpTask& t, std::exception_ptr e, const at::Tensor& result = {});
  bool may_start_locked() const;
  int rank_of(int member) const;  // current rank of an original rank, -1 if not a member

  Runtime& rt_;
  const std::string name_;
  const bool rebuildable_;
  std::atomic<bool> transparent_{true};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OpTask> queue_;
  bool running_ = false;  // a thread executes this group's tasks (the worker or a helper)
  bool paused_ = false;   // the runtime asked: start nothing
  bool faulted_ = false;  // an operation met a failure: nothing starts until the recovery resumes it
  std::optional<Resume> resume_;
  bool stop_ = false;
  std::string stop_why_;
  std::int64_t next_seq_ = 0;
  int generation_ = 0;
  std::map<int, int> forward_;        // transparent recoveries: generation -> the next
  std::map<int, Failure> failures_;
  std::optional<Failure> fatal_;
  std::vector<int> members_;
  int my_original_ = -1;
  comm::Communicator* comm_;
  std::unique_ptr<comm::Communicator> owned_;
  std::vector<RecoveryRecord> records_;
  std::map<std::int64_t, at::Tensor> adopted_early_;  // results adopted before the call was made
  std::function<void(int, int)> on_resize_;
  const void* on_resize_owner_ = nullptr;

  // The executing thread's state (only the thread holding running_ touches these).
  std::vector<InFlight> in_flight_;
  std::int64_t done_seq_ = -1;
  std::deque<Retained> retained_;

  std::atomic<std::int64_t> ddp_started_{0}, ddp_completed_{0};
  std::thread worker_;
};

}  // namespace ftcc::torch_backend
