// recovery/run_job.hpp: run a fault-tolerant program as one job with an honest exit status.
//
//   int main(int argc, char** argv) {
//     int provided = 0;
//     MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
//     return ftcc::recovery::run_job(MPI_COMM_WORLD, opts, [&](ftcc::recovery::ResilientGroup& g) {
//       ... a loop of g.begin_step / g.run / g.set_committed_step ...
//     });                                   // finalizes MPI; returns the exit status for main
//   }
//
// run_job builds the ResilientGroup, runs body(group) and ends the job the same way on every
// survivor (recovery/job_outcome.hpp has the statuses):
//  - body returned: the survivors agree that all of them are done (ResilientGroup::all_finished,
//    recovering if a rank died at the very end), the final group's rank 0 records the outcome,
//    every survivor finalizes; status 0.
//  - an exception left body on some rank (ftcc::InvalidArgument -> 2, ftcc::InternalError, a
//    failed FTCC_INVARIANT, -> 1, anything else -> 4): it is a job-level error:
//    ResilientGroup::fail_job agrees on it, the final group's rank 0 prints one line
//    "NAME: job error on rank R at step S: what" (internal error, configuration error) and records it, every survivor
//    finalizes and returns the status. A JobError thrown by the protocol inside body is the same.
//  - QuorumLost (3) or comm::Timeout (a wait past its deadline: 1): this rank alone is in
//    trouble; it prints one line naming itself and leaves without MPI_Finalize, which the exit
//    guard turns into a process failure the others recover from.
// Ranks killed or crashed leave no status; tools/ftcc-run reports them from the job folder.
// body's recovery hooks are cleared when body returns (they may capture body's locals), before
// the final agreement: a body whose hooks communicate ends its loop with
// `while (!g.all_finished()) {}` itself, so a rank whose last step failed recovers with them.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

#include "ftcc/recovery/resilient_group.hpp"

namespace ftcc::recovery {

struct JobOptions {
  std::string name = "ftcc";  // prefix of the lines run_job prints ("ftcc-train")
  bool quiet = false;         // print nothing (the simulation runs thousands of jobs)
};

int run_job(MPI_Comm parent, const GroupOptions& options, const std::function<void(ResilientGroup&)>& body,
            const JobOptions& job = {});

// run_job's part after the group is built (body, the final agreement, the outcome), for a group
// made some other way (the simulation, recovery/simulation/). `alone`: this rank leaves by
// itself, without MPI_Finalize (QuorumLost, a deadline, superseded, a spare that could not get
// ready, an error that could not be agreed).
struct JobEnd {
  ExitStatus status = ExitStatus::finished;
  bool alone = false;
};
JobEnd run_on_group(ResilientGroup& g, const std::function<void(ResilientGroup&)>& body, const JobOptions& job = {});

}  // namespace ftcc::recovery
