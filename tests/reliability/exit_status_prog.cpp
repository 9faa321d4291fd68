// An embedding program for the exit-status table (tests/reliability/exit_status.py): the way a
// user writes a fault-tolerant loop with recovery/run_job.hpp, plus the ways such a program ends
// badly. Usage (under tools/ftcc-run):
//   exit_status_prog loop [FAULT_SPEC...]   20 steps of a resilient allreduce; checks each sum
//   exit_status_prog throw-on-rank1         rank 1 throws at step 5: a job-level error (4)
//   exit_status_prog invariant-on-rank1     rank 1's FTCC_INVARIANT fails at step 5: internal error (1)
//   exit_status_prog exit-all               every rank makes a ResilientGroup, then exit(1)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/recovery/fault_spec.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/recovery/run_job.hpp"

namespace fr = ftcc::recovery;
namespace fc = ftcc::comm;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const std::string mode = argc > 1 ? argv[1] : "loop";
  fr::GroupOptions opt;
  opt.hang_timeout = std::chrono::milliseconds(2000);
  for (int i = 2; i < argc; ++i) opt.faults.push_back(fr::parse_fault_spec(argv[i]));

  if (mode == "exit-all") {
    fr::ResilientGroup g(MPI_COMM_WORLD, opt);
    std::exit(1);  // NOLINT(concurrency-mt-unsafe): the behaviour under test
  }
  return fr::run_job(MPI_COMM_WORLD, opt, [&](fr::ResilientGroup& g) {
    for (std::int64_t step = 0; step < 20; ++step) {
      g.begin_step(step);
      if (mode == "throw-on-rank1" && g.original_rank() == 1 && step == 5)
        throw std::runtime_error("rank 1 cannot open its input shard");
      const std::int64_t expected_step = mode == "invariant-on-rank1" && g.original_rank() == 1 ? 4 : 5;
      if (step == 5) {
        FTCC_INVARIANT(step == expected_step) << "the loop's step and its record disagree";
      }
      double sum = 0;
      // fn rebuilds its input on every attempt: a retry after a failure starts from scratch.
      const bool ran = g.run(step, [&](fc::Communicator& c) {
        double mine = g.original_rank() + 1.0;
        fc::allreduce(c, &mine, &sum, 1, fc::DType::f64, fc::ReduceOp::sum);
      });
      g.set_committed_step(step);
      if (!ran) continue;  // the group finished this step without this rank's last attempt
      double expected = 0;
      for (int r : g.members()) expected += r + 1.0;
      if (sum != expected) throw std::runtime_error("step " + std::to_string(step) + ": sum " + std::to_string(sum) +
                                                    ", expected " + std::to_string(expected));
    }
    if (g.rank() == 0) std::printf("exit_status_prog: 20 steps on %d of %d ranks\n", g.size(), g.initial_size());
  }, {.name = "exit_status_prog"});
}
