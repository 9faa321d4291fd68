// base/error.hpp checks and comm/errors.hpp messages: what a user reads when things go wrong.
#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/errors.hpp"

namespace {

TEST(Check, PassingCheckDoesNothing) { EXPECT_NO_THROW(FTCC_CHECK(1 + 1 == 2) << "never shown"); }

TEST(Check, FailingCheckThrowsWithContext) {
  try {
    const int rows = 3, cols = 4;
    FTCC_CHECK_EQ(rows, cols) << "matmul inner dims";
    FAIL() << "no throw";
  } catch (const ftcc::InvalidArgument& e) {
    const std::string m = e.what();
    // Named from the source root, wherever the build folder is (-fmacro-prefix-map in meson.build).
    EXPECT_EQ(m.rfind("tests/foundation/error_test.cpp:", 0), 0u) << m;
    EXPECT_NE(m.find("(3 vs 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("matmul inner dims"), std::string::npos) << m;
  }
}

TEST(Check, InvariantThrowsInternalErrorNotInvalidArgument) {
  bool internal = false;
  try {
    const int chosen = 7, step = 6;
    FTCC_INVARIANT(chosen == step) << "progress recorded for step " << chosen;
  } catch (const ftcc::InvalidArgument&) {
    ADD_FAILURE() << "an invariant is not the caller's mistake: it must not be InvalidArgument (exit status 2)";
  } catch (const ftcc::InternalError& e) {
    internal = true;
    const std::string m = e.what();
    EXPECT_NE(m.find("error_test.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("internal invariant failed (a bug in ftcc): chosen == step"), std::string::npos) << m;
    EXPECT_NE(m.find("progress recorded for step 7"), std::string::npos) << m;
  }
  EXPECT_TRUE(internal);
  EXPECT_NO_THROW(FTCC_INVARIANT(true) << "never shown");
}

TEST(Check, InvariantEqNamesBothValues) {
  const std::size_t got = 12, want = 16;
  try {
    FTCC_INVARIANT_EQ(got, want) << "exact_sum: contribution size";
    FAIL() << "no throw";
  } catch (const ftcc::InternalError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("internal invariant failed (a bug in ftcc): (got) == (want)"), std::string::npos) << m;
    EXPECT_NE(m.find("(12 vs 16) exact_sum: contribution size"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(FTCC_INVARIANT_EQ(want, want) << "never shown");
}

TEST(CommErrors, ProcessFailedNamesRanksAndStep) {
  ftcc::comm::ProcessFailed e("ring_allreduce", {1, 3}, 75, 42);
  const std::string m = e.what();
  EXPECT_NE(m.find("ring_allreduce"), std::string::npos);
  EXPECT_NE(m.find("[1,3]"), std::string::npos) << m;
  EXPECT_NE(m.find("step 42"), std::string::npos) << m;
  EXPECT_EQ(e.failed_ranks(), (std::vector<int>{1, 3}));
  const ftcc::comm::FaultDetected& base = e;  // one catch covers ProcessFailed and Revoked
  EXPECT_EQ(base.mpi_error_class(), 75);
}

TEST(CommErrors, TimeoutNamesPeers) {
  ftcc::comm::Timeout e("broadcast", {2}, 1.5);
  EXPECT_NE(std::string(e.what()).find("peer(s) [2]"), std::string::npos) << e.what();
  EXPECT_DOUBLE_EQ(e.waited_s(), 1.5);
}

}  // namespace
