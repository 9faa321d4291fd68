// recovery/job_outcome.hpp: how a job ends, as a scheduler sees it (exit status) and as
// tools/ftcc-run learns it (records in the job folder).
//
// Exit statuses, the contract of ftcc-run, ftcc-train and programs that use run_job()
// (recovery/run_job.hpp); docs/reliability.md, "Exit statuses", has the table with examples:
//   0 finished        the work finished on the final group (after any number of recoveries)
//   1 internal        an error in ftcc itself or in the launcher
//   2 config_error    a configuration error (bad flag, incompatible checkpoint), agreed by all
//   3 quorum_lost     the survivors held no majority of the group (a partition): they stopped
//   4 job_error       an error any rank in that role would hit (unwritable checkpoint folder,
//                     non-finite loss, an exception on one rank), agreed by all and reported once
//   5 all_ranks_lost  every rank was lost (killed, or exited without finishing) before the end
//   6 crashed         like 5, and at least one rank crashed (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT)
//   7 not_started     the job never formed its group: a rank did not come up before ftcc-run's
//                     start-up deadline, or one was lost while the group was being formed
//   128+N             tools/ftcc-run was stopped by signal N (SIGTERM from a scheduler: 143)
//
// Records: under tools/ftcc-run the environment names a fresh job folder (FTCC_JOB_DIR). The
// first ResilientGroup of each rank writes rank-R.started and installs a crash handler that
// writes rank-R.crashed (the signal) before the process dies; a rank that leaves without MPI_Finalize
// (the exit guard, a deadline) writes rank-R.left saying how, one that exits after MPI_Finalize
// writes rank-R.exited; QuorumLost writes rank-R.quorum;
// the final group's rank 0 writes `outcome` (status and one line), atomically (temp + rename), or,
// where the processes' own exit status is the job's (the torch backend), `finished` (its line).
// ftcc-run reads them because Open MPI's mpirun, under --with-ft ulfm, ignores killed ranks:
// a job whose every rank died would otherwise exit 0. Without FTCC_JOB_DIR nothing is written.
// Every writer is best effort: a record that cannot be written is reported on stderr, never thrown.
#pragma once

#include <cstdint>
#include <string>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {

enum class ExitStatus : int {
  finished = 0,
  internal = 1,
  config_error = 2,
  quorum_lost = 3,
  job_error = 4,
  all_ranks_lost = 5,
  crashed = 6,
  not_started = 7,
};
const char* to_string(ExitStatus s);

// A job-level error: raised on one rank (ResilientGroup::fail_job), agreed among the survivors,
// and thrown identically on every survivor. rank() is the original rank that saw it first.
class JobError : public ftcc::Error {
 public:
  JobError(ExitStatus status, int rank, std::int64_t step, std::string message, bool agreed);
  ExitStatus status() const { return status_; }
  int rank() const { return rank_; }
  std::int64_t step() const { return step_; }
  const std::string& message() const { return message_; }
  // False when ULFM is off: then only this rank knows, and the launcher ends the job.
  bool agreed() const { return agreed_; }
  // "job error on rank 1 at step 3: <message>"
  std::string line() const;

 private:
  ExitStatus status_;
  int rank_;
  std::int64_t step_;
  std::string message_;
  bool agreed_;
};

namespace job_record {

// The job folder (FTCC_JOB_DIR), or "" when none is set.
const std::string& dir();
// Before the group forms (after MPI_Init): rank-R.joining, the crash handler and the exit guard's
// record, so that a job whose group never forms says which ranks came up.
void joining(int original_rank);
// The first group formed: `formed` (written by every rank of it; one suffices). tools/ftcc-run's start-up deadline
// waits for it.
void formed(int processes);
// Once per process: rank-R.started (and what joining() sets up, if it did not run).
void started(int original_rank);
// The outcome of the job, written once by the final group's rank 0. new_lost: processes started by
// a respawn that were lost (Open MPI's mpirun exits non-zero for them although the job recovered).
void outcome(ExitStatus status, const std::string& line, int world_initial, int world_final, int new_lost = 0);
// A job whose exit status is its processes' own (the torch backend: the program may still fail
// after the group ended) finished its work on the final group: `finished`, written once by that
// group's rank 0 with its line ("the job finished on 3 of 4 ranks (1 recovery)"). Not an outcome:
// it only starts tools/ftcc-run's finish grace (FTCC_FINISH_GRACE), so that a process that never
// exits after the end (stopped, or stuck in an exit handler) is stopped instead of waited for.
void finished(const std::string& line);
// This rank stopped because its side lost the quorum.
void quorum_lost(int original_rank, const std::string& line);
// This process is leaving without MPI_Finalize, and how ("exited with status 1", "deadline ...").
void left(const std::string& how);
// Another process of this host, original rank `rank`, was stopped for good by this one, and how.
void left_for(int rank, const std::string& how);
// This process exits with `status` after MPI_Finalize: mpirun reports its status itself.
void exited(int status);
// This process refused its job before any group formed (every rank alike: bad options) and exits
// with `status` after MPI_Finalize: rank-R.joining and rank-R.exited. Open MPI's mpirun was seen
// to crash (SIGSEGV) when every rank leaves at once with a non-zero status; from these records
// tools/ftcc-run reports the ranks' own status instead of the launcher's crash.
void refused(int original_rank, int status);

}  // namespace job_record

}  // namespace ftcc::recovery
