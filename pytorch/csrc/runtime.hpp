// pytorch/csrc/runtime.hpp: the process-wide half of the ftcc torch backend.
//
// One per process: MPI (initialized here if the program did not), one recovery::ResilientGroup on
// MPI_COMM_WORLD (the heartbeat, fencing, the job folder's records: "the universe"), the runner of
// every process group this process is a member of (group_runner.hpp), and the sentinel thread.
//
// The sentinel makes every MPI call on the universe that is not a group's operation: forming a
// sub-group (MPI_Comm_create_group), the job's end (finish, fail), fault injection's step marks,
// and recovery. It also watches the universe: an idle process learns of a failure or a revoke
// through a receive that nothing ever matches (ULFM completes it with an error).
// A failure is one event for the whole job: whichever thread meets it first (a runner's operation,
// the sentinel's watch) asks for a recovery; every survivor's sentinel then
//   1. revokes the universe and pauses the default group's runner (its communicator is replaced);
//   2. runs ResilientGroup::recover(): shrink and agree on the failed processes (once, for all);
//   3. for every sub-group that lost a member, in creation order: revokes it, pauses its runner
//      and forms the survivors' communicator (MPI_Comm_create_group on the new universe);
//   4. resumes those runners, which reconcile their calls in flight (transparent, or RankFailure).
// Groups that lost nobody are not touched and keep running meanwhile. Failures that end the job
// for this process (a job-level error agreed by the survivors, quorum lost, superseded, a
// deadline) are handed to every runner: every later operation fails with that error (fatal).
//
// Thread safety: every public member may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "group_failure.hpp"
#include "group_runner.hpp"

namespace ftcc::recovery {
class ResilientGroup;
}
namespace ftcc::comm {
class Communicator;
}

namespace ftcc::torch_backend {

// "[0, 2]": ranks as the messages print them.
std::string rank_list(const std::vector<std::int64_t>& ranks);
std::string rank_list(const std::vector<int>& ranks);

class Runtime {
 public:
  // The runtime, created by the first call: initializes MPI if needed and forms the universe (a
  // collective over MPI_COMM_WORLD). Throws ftcc::Error with one line when it cannot (no ULFM, a
  // bad FTCC_* setting, a launch that is not an MPI job). timeout_s: the torch timeout.
  static Runtime& start(double timeout_s);
  // What is wrong with the FTCC_* settings (hang and call timeouts, ULFM timeout, faults), one
  // line; empty when nothing. Reads the environment only (no MPI): checked before MPI starts, so
  // a bad setting is a configuration error (exit 2), not a rank that never joined.
  static std::string settings_error();
  double timeout_s() const { return timeout_s_; }
  static Runtime* existing();

  // The default group (every process of the job, renumbered after recoveries).
  std::shared_ptr<GroupRunner> world() const { return world_; }
  // A sub-group of the members named (original ranks, in group-rank order), made on every member
  // (torch calls it on members only). `tag` must be the same on every member and differ between
  // groups made at the same time (torch's group name gives it).
  std::shared_ptr<GroupRunner> create_group(const std::string& name, const std::vector<int>& members);
  // torch's reconfigure (process_group_ftcc.hpp): the group of the members named (original ranks,
  // in group-rank order), made by them alone, explicit on failures. The members first meet (each
  // hears from every other, with the same uuid and member list, within timeout_s: else one
  // ftcc::Error naming who did not come). A failure met while forming it is recovered first (the
  // one agreement on who failed), then every member refuses the same way when a member named is
  // among the failed: one ftcc::Error naming them, never a hang.
  std::shared_ptr<GroupRunner> reconfigure_group(const std::string& name, const std::vector<int>& members,
                                                 std::int64_t uuid, double timeout_s);
  // Original ranks of every process the job started with (alive or not): what a handle may name.
  int job_size() const { return job_size_; }
  int original_rank() const { return original_rank_; }
  // Original ranks of the processes alive in the job, in the universe's order.
  std::vector<int> universe_members() const;

  // The start of training step `step`: fault injection (FTCC_FAULTS) and the watchdog's mark.
  void begin_step(std::int64_t step);
  // Every recovery of every group this process is a member of, in order.
  std::vector<RecoveryRecord> recoveries() const;
  int epoch() const;

  // A runner's operation met a failure (comm::FaultDetected): make sure a recovery runs. Returns
  // at once; the runner is resumed (or failed) by the sentinel.
  void request_recovery(const std::string& cause);

  // The end of the program (the Python layer calls exactly one of them, once):
  // clean: the survivors agree that all of them are done (recovering if a rank is lost at the
  // end), the final group's rank 0 says so on one line, MPI is finalized. Returns 0, or the status
  // to leave with (job error, superseded, a deadline).
  int finish();
  // An error left the program on this rank: stops the job with it once (every survivor reports
  // the same job error), records the outcome, finalizes. Returns the exit status to end with.
  int fail(const std::string& message, bool config_error);

  // An exception_ptr for `f` as the caller should see it (rank_failure.hpp makes the Python type).
  static std::exception_ptr error_for(const Failure& f);
  static void say(const std::string& line);

 private:
  explicit Runtime(double timeout_s);
  void sentinel_loop();
  void watch_universe();       // the liveness receive (sentinel only)
  void cancel_watch();
  void recover_all();          // steps 1-4 at the top (sentinel only)
  void fail_everything(const Failure& f);
  // A communicator of the members named (original ranks), made on the universe by them alone
  // (MPI_Comm_create_group; sentinel only).
  std::unique_ptr<comm::Communicator> make_communicator(const std::vector<int>& members, const std::string& name);
  void meet(const std::vector<int>& members, std::int64_t uuid, double timeout_s);  // reconfigure_group's (sentinel)
  template <class F>
  void on_sentinel(F&& f);     // runs f on the sentinel and waits for it (rethrows its exception)
  void run_on_sentinel(const std::function<void()>& f);  // the same, for other files of the runtime
  int leave_alone(const std::string& record, const std::string& why);
  void report_job_error(int status, const std::string& line);
  void end_group();            // runners stopped, communicators freed, MPI finalized

  double timeout_s_;
  std::unique_ptr<recovery::ResilientGroup> universe_;
  std::shared_ptr<GroupRunner> world_;
  int original_rank_ = -1;
  int job_size_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> controls_;
  std::vector<std::weak_ptr<GroupRunner>> groups_;  // sub-groups, in creation order
  bool recovery_requested_ = false;
  std::string cause_;
  std::chrono::steady_clock::time_point noticed_{};
  int epoch_ = 0;
  std::optional<Failure> fatal_;
  bool stop_ = false;
  bool ended_ = false;          // finish() or fail() ran
  std::int64_t step_ = -1;      // the last begin_step()
  void* watch_request_ = nullptr;  // the liveness receive (an MPI_Request, sentinel only)
  std::thread sentinel_;
};

}  // namespace ftcc::torch_backend
