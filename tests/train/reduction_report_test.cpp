// train/reduction_report: what a wrong gradient sum (--verify-reductions) leads to, and its words.
#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"
#include "ftcc/train/reduction_report.hpp"

namespace {

namespace ft = ftcc::train;
using Action = ft::ReductionOutcome::Action;

// The sum's group: ranks 0..3 of the group are original ranks 0, 2, 5, 7 (a dp group of a hybrid).
const std::vector<int> kOriginal = {0, 2, 5, 7};

TEST(ReductionReport, RightWhenRepeatedGoesOn) {
  ft::ReductionCheck k;
  k.mismatch = k.repeated_clean = true;
  k.buckets = {1};
  k.wrong_at = {1, 3};
  const auto o = ft::judge_reduction(k, 12, kOriginal);
  EXPECT_EQ(o.action, Action::go_on);
  EXPECT_EQ(o.event["wrong_at"], nlohmann::json({2, 7}));  // original ranks
  EXPECT_EQ(o.event["repeated"], "right");
  EXPECT_EQ(o.event["excluded"], nlohmann::json::array());
  EXPECT_NE(o.line.find("reached rank(s) 2, 7 changed"), std::string::npos) << o.line;
  EXPECT_NE(o.line.find("right, used"), std::string::npos) << o.line;
}

TEST(ReductionReport, OneSuspectIsExcludedByItsOriginalRank) {
  ft::ReductionCheck k;
  k.mismatch = true;
  k.buckets = {0, 2};
  k.wrong_at = {0, 1, 2, 3};
  k.probe.bad_links = {{1, 2}, {3, 2}};
  k.probe.suspects = {2};
  const auto o = ft::judge_reduction(k, 30, kOriginal);
  EXPECT_EQ(o.action, Action::exclude);
  EXPECT_EQ(o.excluded, 5);
  EXPECT_EQ(o.event["links"], nlohmann::json({{2, 5}, {7, 5}}));
  EXPECT_EQ(o.event["excluded"], nlohmann::json({5}));
  EXPECT_NE(o.line.find("data changed on rank 2 -> rank 5, rank 7 -> rank 5: rank 5 excluded; step 30 is redone"),
            std::string::npos) << o.line;
  EXPECT_NE(o.why.find("at step 30"), std::string::npos) << o.why;
}

TEST(ReductionReport, NoSingleSuspectStops) {
  ft::ReductionCheck k;
  k.mismatch = true;
  k.buckets = {0};
  k.wrong_at = {0, 1};
  k.probe.bad_links = {{0, 1}};
  k.probe.suspects = {0, 1};
  auto o = ft::judge_reduction(k, 12, {4, 9});
  EXPECT_EQ(o.action, Action::stop);
  EXPECT_NE(o.line.find("rank(s) 4, 9 equally suspect, no single rank to exclude: stopping"), std::string::npos) << o.line;
  // A transient fault that passed the repeat's window, or a fault in a rank's own adder: no link.
  k.probe = {};
  o = ft::judge_reduction(k, 12, {4, 9});
  EXPECT_EQ(o.action, Action::stop);
  EXPECT_NE(o.line.find("found no link changing data: no single rank to exclude"), std::string::npos) << o.line;
  EXPECT_EQ(o.event["links"], nlohmann::json::array());
}

TEST(ReductionReport, RefusesACleanCheckAndUnknownRanks) {
  EXPECT_THROW(ft::judge_reduction({}, 1, kOriginal), ftcc::InternalError);
  ft::ReductionCheck k;
  k.mismatch = true;
  k.wrong_at = {4};
  EXPECT_THROW(ft::judge_reduction(k, 1, kOriginal), ftcc::InternalError);
}

}  // namespace
