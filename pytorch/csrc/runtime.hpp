// pytorch/csrc/runtime.hpp: the process-wide half of the ftcc torch backend.
//
// One per process: MPI (initialized here if the program did not), one recovery::ResilientGroup on
// MPI_COMM_WORLD (heartbeat, fencing, the job folder's records) and one worker thread that makes
// every MPI call of the process, in submission order. The c10d backends (process_group_ftcc.hpp)
// submit their collectives here; torch's threads never touch MPI.
//
// Generations. Generation 0 is the world. When an operation of generation g meets a dead peer
// (comm::FaultDetected), the worker runs ResilientGroup::recover() on every survivor (a survivor
// whose own operation completed joins at its next one: the communicator is revoked), which agrees
// on the failed ranks and installs the survivors as generation g+1. Every operation of generation
// g, pending or later, then fails with the same Failure: the failed ranks in g's numbering, the
// same list on every survivor. A backend of generation g+1 (Backend::shrink) continues.
// Failures that end the job for this process (a job-level error agreed by the survivors, quorum
// lost, superseded, a deadline) make every later operation fail with that error (fatal).
//
// Thread safety: every public member may be called from any thread. submit() never blocks on MPI.
// One thread at a time runs tasks (running_): the worker, or a caller inside help().
// Deadlines: collectives use the communicator's timeout (FTCC_COMM_TIMEOUT_S, else the torch
// timeout); point-to-point waits the same; recover() has the ULFM deadlines of recovery/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/recovery/job_outcome.hpp"

namespace ftcc::recovery {
class ResilientGroup;
}

namespace ftcc::torch_backend {

// "[0, 2]": ranks as the messages print them.
std::string rank_list(const std::vector<std::int64_t>& ranks);

// Why a generation ended.
struct Failure {
  bool fatal = false;                  // the job cannot go on here (see the top of the file)
  std::vector<std::int64_t> failed;    // failed ranks in the ended generation's numbering (sorted)
  std::vector<int> failed_original;    // the same processes, as original (world) ranks
  int next_generation = -1;            // the survivors' generation (-1 when fatal)
  std::string message;                 // one line: what happened, where, what to do
  std::optional<recovery::ExitStatus> job_status;  // set when the survivors agreed on a job error
};

struct GenerationInfo {
  std::vector<int> members;  // original rank of each rank
  int rank = -1;             // this process's rank in it
  int size() const { return static_cast<int>(members.size()); }
};

class Runtime {
 public:
  // Work for the worker. run() makes the MPI calls; it may return a poll function for an
  // operation still in flight (point-to-point), which the worker calls until it returns true.
  // done() gets nullptr or the operation's error. Both run on the worker thread.
  using Poll = std::function<bool()>;
  using Run = std::function<Poll(comm::Communicator&)>;
  using Done = std::function<void(std::exception_ptr)>;

  // The runtime, created by the first call: initializes MPI if needed and forms the group (a
  // collective over MPI_COMM_WORLD). Throws ftcc::Error with one line when it cannot (no ULFM, a
  // bad FTCC_* setting, a launch that is not an MPI job). timeout_s: the torch timeout.
  static Runtime& start(double timeout_s);
  // The runtime if started, else nullptr.
  static Runtime* existing();

  int generation() const;
  GenerationInfo info(int generation) const;
  // The failure that ended `generation`, if it ended.
  std::optional<Failure> failure(int generation) const;

  // Runs `run` on generation `generation`'s communicator, then `done`, in submission order, on
  // the worker thread, or on the thread that waits for it (help()). If that generation has ended
  // by then, `done` gets its failure without `run` being called. Returns the task's id.
  std::uint64_t submit(int generation, const char* op, Run run, Done done);
  // The caller is about to wait for task `id`: if it is still queued and no thread is running a
  // task, run the queue up to it on this thread (the order stays the submission order). A
  // synchronous collective then costs no thread switch; an asynchronous one (DDP's buckets) is
  // still started by the worker after kInlineGrace if nobody waits for it sooner.
  void help(std::uint64_t id);
  static constexpr std::chrono::microseconds kInlineGrace{100};

  // The start of training step `step`: fault injection (FTCC_FAULTS) and the watchdog's mark.
  void begin_step(std::int64_t step);

  // The end of the program (the Python layer calls these, exactly one of them, once):
  // clean: the survivors agree that all of them are done (recovering if a rank is lost at the
  // end), the final group's rank 0 says so on one line, MPI is finalized; the process's own exit
  // status is then the job's (no outcome record: tools/ftcc-run reports mpirun's status, the
  // survivors'). Returns 0, or the status to leave with (job error, superseded, a deadline).
  int finish();
  // An error left the program on this rank: stops the job with it once (every survivor reports
  // the same job error; recovery/resilient_group.hpp fail_job), records the outcome, finalizes.
  // Returns the exit status the process should end with. An error that is itself a failure the
  // job already agreed on (a fatal Failure with job_status) is not raised again.
  int fail(const std::string& message, bool config_error);

  // An exception_ptr for `f` as the caller should see it (rank_failure.hpp makes the Python type).
  static std::exception_ptr error_for(const Failure& f);

 private:
  explicit Runtime(double timeout_s);
  struct Task {
    int generation;
    const char* op;
    Run run;
    Done done;
    std::function<void()> control;  // run_on_worker's tasks: no generation, no communicator
    std::uint64_t id = 0;
    std::chrono::steady_clock::time_point submitted;
  };
  struct InFlight {
    int generation;
    const char* op;
    Poll poll;
    Done done;
  };
  void loop();
  void execute(Task& t);
  void poll_in_flight();
  // A FaultDetected in generation g: recover and record g's failure (worker only).
  void on_fault(int generation, const char* op, const std::string& cause);
  void on_fatal(int generation, const std::string& message, std::optional<recovery::ExitStatus> status);
  void fail_in_flight(int generation);
  void abandon_in_flight(const std::string& why);
  // The job's end on this process (finish, fail; the running thread only):
  int leave_alone(const std::string& record, const std::string& why);  // no MPI_Finalize; status 1
  void report_job_error(recovery::ExitStatus status, const std::string& line);  // the reporter's line and outcome
  void end_group();  // in-flight requests answered, the group destroyed, MPI finalized  // the job ended: answer them, drop the requests
  static thread_local bool t_running;  // this thread is running tasks (the worker, or inside help())
  template <class F>
  void run_on_worker(F&& f);  // runs f on the worker and waits for it (start-up, finish, fail)

  double timeout_s_;
  std::unique_ptr<recovery::ResilientGroup> group_;
  std::thread worker_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::vector<InFlight> in_flight_;  // only the thread that holds running_
  bool running_ = false;             // a thread (the worker or a helping caller) is running tasks
  std::uint64_t next_id_ = 0;
  std::vector<GenerationInfo> generations_;
  std::map<int, Failure> failures_;
  std::int64_t ops_ = 0;             // operations run (the "step" recover() reports without begin_step)
  std::int64_t step_ = -1;           // the last begin_step()
  bool stop_ = false;
  bool ended_ = false;               // finish() or fail() ran (the running thread only)
};

}  // namespace ftcc::torch_backend
