// GoogleTest main for multi-rank tests, run as `tools/ftcc-run -n N test-binary [--ftcc-expect-killed=K]`.
//
// - Initializes MPI (MPI_THREAD_MULTIPLE when available) and sets MPI_ERRORS_RETURN on
//   MPI_COMM_WORLD, so a dead peer surfaces as an error code, not an abort.
// - Rank 0 prints GoogleTest's normal output; the other ranks print only their failures,
//   prefixed with their rank, so one failing rank is never hidden behind a passing rank 0.
// - At the end the survivors agree (MPIX_Comm_agree: fault-tolerant, works after failures)
//   on "every survivor passed" and count the processes that died. The run passes only if
//   every survivor passed and exactly K processes died, K given by --ftcc-expect-killed=K
//   (default 0): an unexpected crash of one rank fails the run even when the others pass.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ftcc/recovery/job_outcome.hpp"
#include "ftcc_config.hpp"
#if FTCC_HAVE_ULFM
#include <mpi-ext.h>
#endif

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Prints only failures, tagged with the rank: used on every rank but 0.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] FAILURE %s:%d\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  // Every rank is up: tools/ftcc-run's start-up deadline is met (its tests form their own groups,
  // or none).
  {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ftcc::recovery::job_record::formed(size);
  }
  int expect_killed = 0;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--ftcc-expect-killed=", 21) == 0) expect_killed = std::atoi(argv[i] + 21);

  ::testing::InitGoogleTest(&argc, argv);
  const int rank = world_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();

  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int all_passed = result == 0 ? 1 : 0;
  int died = 0;
#if FTCC_HAVE_ULFM
  // Agree on the AND of the pass flags; a failure noticed during the agreement is reported
  // once (then acknowledged), and the agreement is repeated so every survivor gets one answer.
  for (int attempt = 0; attempt < 8; ++attempt) {
    int flag = all_passed;
    int rc = MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    if (rc == MPI_SUCCESS || (cls != MPIX_ERR_PROC_FAILED && cls != MPIX_ERR_PROC_FAILED_PENDING)) {
      all_passed = flag;
      break;
    }
    int acked = 0;
    MPIX_Comm_ack_failed(MPI_COMM_WORLD, size, &acked);
  }
  MPI_Group failed;
  if (MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed) == MPI_SUCCESS) {
    MPI_Group_size(failed, &died);
    MPI_Group_free(&failed);
  }
#else
  MPI_Allreduce(MPI_IN_PLACE, &all_passed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
#endif
  // The lowest survivor reports. Survivors keep their world ranks; find whether a lower one lives.
  bool reporter = true;
#if FTCC_HAVE_ULFM
  {
    MPI_Group failed_g, world_g;
    MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed_g);
    MPI_Comm_group(MPI_COMM_WORLD, &world_g);
    int n = 0;
    MPI_Group_size(failed_g, &n);
    for (int r = 0; r < rank && reporter; ++r) {
      int in_failed = MPI_UNDEFINED;
      MPI_Group_translate_ranks(world_g, 1, &r, failed_g, &in_failed);
      if (in_failed == MPI_UNDEFINED) reporter = false;  // a lower rank is alive
    }
    MPI_Group_free(&failed_g);
    MPI_Group_free(&world_g);
  }
#else
  reporter = rank == 0;
#endif
  const bool ok = all_passed && died == expect_killed;
  if (reporter) {
    std::printf("ftcc-test: %d ranks, %d died (expected %d), survivors %s: %s\n", size, died, expect_killed,
                all_passed ? "all passed" : "NOT all passed", ok ? "PASS" : "FAIL");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
