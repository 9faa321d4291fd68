// An embedding program for the fencing tests (tests/reliability/fencing.py): a resilient allreduce
// loop whose training group's rank 0 records its progress in a file, the way a trainer writes its
// checkpoints (temporary file, ResilientGroup::check_current, rename). Under tools/ftcc-run:
//   stale_copy_prog STEPS STEP_MS OUT_FILE [--no-fence] [--hang-timeout-ms N] [--stop-before-write S]
//                   [--die-before-group R]
// Each step sleeps STEP_MS, then sums (original rank + 1) over the group and checks the sum.
// OUT_FILE holds "step S world W members ..." after each step. --no-fence keeps hung ranks alive
// (GroupOptions::fence = false): only the generation fence then stops a stale copy.
// --stop-before-write S: the rank writing OUT_FILE stops itself (SIGSTOP) at step S between its
// allreduce and its write, as a rank frozen at the worst moment; the test continues it later.
// --die-before-group R: rank R is killed (SIGKILL) after MPI_Init, before its group forms: the
// others cannot form theirs (tests/reliability/launcher.py).
#include <mpi.h>

#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/recovery/run_job.hpp"

namespace fr = ftcc::recovery;
namespace fc = ftcc::comm;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (argc < 4) {
    std::fprintf(stderr, "usage: stale_copy_prog STEPS STEP_MS OUT_FILE [--no-fence] [--hang-timeout-ms N]\n");
    MPI_Finalize();
    return 2;
  }
  const std::int64_t steps = std::atoll(argv[1]);
  const int step_ms = std::atoi(argv[2]);
  const std::string out = argv[3];
  std::int64_t stop_at = -1;
  fr::GroupOptions opt;
  opt.hang_timeout = std::chrono::milliseconds(1000);
  for (int i = 4; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-fence") == 0) opt.fence = false;
    if (std::strcmp(argv[i], "--die-before-group") == 0 && i + 1 < argc) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == std::atoi(argv[++i])) std::raise(SIGKILL);
    }
    if (std::strcmp(argv[i], "--stop-before-write") == 0 && i + 1 < argc) stop_at = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--hang-timeout-ms") == 0 && i + 1 < argc) opt.hang_timeout = std::chrono::milliseconds(std::atoi(argv[++i]));
  }
  return fr::run_job(MPI_COMM_WORLD, opt, [&](fr::ResilientGroup& g) {
    for (std::int64_t step = 0; step < steps; ++step) {
      g.begin_step(step);
      std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      double sum = 0;
      const bool ran = g.run(step, [&](fc::Communicator& c) {
        double mine = g.original_rank() + 1.0;
        fc::allreduce(c, &mine, &sum, 1, fc::DType::f64, fc::ReduceOp::sum);
      });
      g.set_committed_step(step);
      if (!ran) continue;
      double expected = 0;
      for (int r : g.members()) expected += r + 1.0;
      if (sum != expected) throw std::runtime_error("step " + std::to_string(step) + ": sum " + std::to_string(sum) +
                                                    ", expected " + std::to_string(expected));
      if (g.rank() != 0) continue;
      const std::string tmp = out + ".tmp";
      {
        std::ofstream f(tmp, std::ios::trunc);
        f << "step " << step << " world " << g.size() << " members";
        for (int r : g.members()) f << " " << r;
        f << "\n";
      }
      if (step == stop_at) std::raise(SIGSTOP);
      g.check_current("writing " + out + " at step " + std::to_string(step));
      if (std::rename(tmp.c_str(), out.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp);
    }
    if (g.rank() == 0) std::printf("stale_copy_prog: %lld steps on %d of %d ranks\n", static_cast<long long>(steps), g.size(), g.initial_size());
  }, {.name = "stale_copy_prog"});
}
