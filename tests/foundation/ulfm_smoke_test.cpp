// ULFM smoke proof: real processes die (SIGKILL) inside a loop of MPI_Allreduce, and the
// survivors revoke, shrink (through comm/ulfm.hpp) and finish the loop with correct sums.
//
//   KillOneOfFour   run with 4 ranks, --ftcc-expect-killed=1: rank 2 dies at iteration 50
//   KillTwoOfSix    run with 6 ranks, --ftcc-expect-killed=2: rank 1 dies at 30, rank 4 at 70
//
// Rank r contributes r+1 (its world rank), so the expected sum at iteration i is the sum of
// (r+1) over the ranks still alive at i: every survivor computes it from the kill plan.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <map>

#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/comm/ulfm.hpp"

namespace {

using ftcc::comm::FaultDetected;

struct LoopResult {
  int final_size = 0;
  int recoveries = 0;
  double worst_recovery_ms = 0;
};

// kill_plan: world rank -> iteration at which it SIGKILLs itself.
LoopResult allreduce_loop_with_kills(const std::map<int, int>& kill_plan, int iterations) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int world_size = 0;
  MPI_Comm_size(comm, &world_size);

  LoopResult res;
  for (int it = 0; it < iterations; ++it) {
    auto mine = kill_plan.find(world_rank);
    if (mine != kill_plan.end() && mine->second == it) std::raise(SIGKILL);

    long expected = 0;
    for (int r = 0; r < world_size; ++r) {
      auto k = kill_plan.find(r);
      if (k == kill_plan.end() || k->second > it) expected += r + 1;
    }
    long contribution = world_rank + 1, sum = 0;
    try {
      FTCC_MPI_CHECK(MPI_Allreduce(&contribution, &sum, 1, MPI_LONG, MPI_SUM, comm), comm, "smoke allreduce");
    } catch (const FaultDetected&) {
      const auto t0 = std::chrono::steady_clock::now();
      ftcc::comm::revoke(comm);
      MPI_Comm survivors = ftcc::comm::shrink(comm);
      MPI_Comm_free(&comm);
      comm = survivors;
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      res.worst_recovery_ms = std::max(res.worst_recovery_ms, ms);
      ++res.recoveries;
      --it;  // redo this iteration on the survivors
      continue;
    }
    EXPECT_EQ(sum, expected) << "iteration " << it;
  }
  MPI_Comm_size(comm, &res.final_size);
  MPI_Comm_free(&comm);
  return res;
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

TEST(UlfmSmoke, KillOneOfFour) {
  ASSERT_EQ(world_size(), 4) << "run with 4 ranks";
  ASSERT_TRUE(ftcc::comm::has_ulfm());
  const LoopResult r = allreduce_loop_with_kills({{2, 50}}, 200);
  EXPECT_EQ(r.final_size, 3);
  EXPECT_EQ(r.recoveries, 1);
  RecordProperty("worst_recovery_ms", std::to_string(r.worst_recovery_ms));
}

TEST(UlfmSmoke, KillTwoOfSix) {
  ASSERT_EQ(world_size(), 6) << "run with 6 ranks";
  const LoopResult r = allreduce_loop_with_kills({{1, 30}, {4, 70}}, 200);
  EXPECT_EQ(r.final_size, 4);
  EXPECT_EQ(r.recoveries, 2);
}

}  // namespace
