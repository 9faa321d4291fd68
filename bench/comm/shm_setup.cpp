// bench/comm/shm_setup.cpp: what a communicator's shared-memory set-up costs (docs/collectives.md,
// "The segment"), by backing: a new communicator's first allreduce (4 bytes), which sets the
// segment up, with FTCC_SHM_BACKING=memfd (the default), =posix (a named object in /dev/shm,
// its pages reserved) and FTCC_SHM=0 (no segment: the baseline), the three interleaved.
//   tools/ftcc-run -n 4 build/bench/comm/shm-setup [REPEATS]
// Prints the median and the quartiles of each, in ms, on rank 0.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/communicator.hpp"

namespace fc = ftcc::comm;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  struct Kind {
    const char* name;
    const char* shm;
    const char* backing;
    std::vector<double> ms;
  };
  std::vector<Kind> kinds{{"memfd (default)", "1", "memfd", {}}, {"posix (reserved)", "1", "posix", {}},
                          {"none (FTCC_SHM=0)", "0", "memfd", {}}};
  bool shared = true;
  for (int r = 0; r < repeats + 1; ++r)  // the first round warms up, not counted
    for (Kind& k : kinds) {
      setenv("FTCC_SHM", k.shm, 1);  // NOLINT(concurrency-mt-unsafe): one thread
      setenv("FTCC_SHM_BACKING", k.backing, 1);  // NOLINT(concurrency-mt-unsafe)
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      fc::Communicator comm = fc::Communicator::duplicate(MPI_COMM_WORLD);
      int one = 1, sum = 0;
      fc::allreduce(comm, &one, &sum, 1, fc::DType::i32, fc::ReduceOp::sum);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank's
      if (r > 0) k.ms.push_back(ms);
      if (std::string(k.shm) == "1" && !comm.uses_shared_memory()) shared = false;
    }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) {
    std::printf("shared-memory set-up, %d ranks, %d repeats (a new communicator's first 4-byte allreduce, ms, the "
                "slowest rank's)%s\n", size, repeats, shared ? "" : " [WARNING: some run had no shared memory]");
    for (Kind& k : kinds) {
      std::sort(k.ms.begin(), k.ms.end());
      auto at = [&](double q) { return k.ms[static_cast<std::size_t>(q * static_cast<double>(k.ms.size() - 1) + 0.5)]; };
      std::printf("  %-18s median %7.2f   [%.2f, %.2f]\n", k.name, at(0.5), at(0.25), at(0.75));
    }
  }
  MPI_Finalize();
  return 0;
}
