// The straggler watch (train/straggler_watch.hpp): a rank slower than factor x the median at
// `window` checks in a row, reported once per streak, followed across renumbering; the eviction rule.
#include <gtest/gtest.h>

#include <vector>

#include "ftcc/train/straggler_watch.hpp"

namespace ft = ftcc::train;

namespace {

TEST(StragglerWatch, ReportsAfterWindowChecksInARowOncePerStreak) {
  ft::StragglerWatch w(2.0, 3);
  const std::vector<int> members{0, 1, 2, 3};
  const std::vector<double> slow{10, 10, 31, 10};  // rank 2 at 3.1x
  EXPECT_TRUE(w.observe(slow, members).empty());
  EXPECT_TRUE(w.observe(slow, members).empty());
  EXPECT_EQ(w.observe(slow, members), (std::vector<int>{2}));
  EXPECT_DOUBLE_EQ(w.median_ms(), 10);
  EXPECT_DOUBLE_EQ(w.others_ms(2), 10);
  EXPECT_DOUBLE_EQ(w.slowdown(2), 3.1);
  EXPECT_TRUE(w.observe(slow, members).empty());  // the same streak: said once
  EXPECT_TRUE(w.observe(std::vector<double>{10, 10, 10, 10}, members).empty());  // the streak ends
  EXPECT_TRUE(w.observe(slow, members).empty());
  EXPECT_TRUE(w.observe(slow, members).empty());
  EXPECT_EQ(w.observe(slow, members), (std::vector<int>{2}));  // a new streak
}

TEST(StragglerWatch, BrieflySlowIsNotAStraggler) {
  ft::StragglerWatch w(2.0, 3);
  const std::vector<int> members{0, 1, 2};
  for (int i = 0; i < 10; ++i) {
    const std::vector<double> t{10, i % 3 == 2 ? 10.0 : 25.0, 11};  // slow twice, then not, ...
    EXPECT_TRUE(w.observe(t, members).empty()) << "check " << i;
  }
  // At exactly the factor: not slow.
  ft::StragglerWatch edge(2.0, 1);
  EXPECT_TRUE(edge.observe(std::vector<double>{10, 20, 10}, members).empty());
}

TEST(StragglerWatch, FollowsOriginalRanksAndSkipsIdleOnes) {
  ft::StragglerWatch w(2.0, 2);
  EXPECT_TRUE(w.observe(std::vector<double>{10, 30, 10, 10}, std::vector<int>{0, 1, 2, 3}).empty());
  // Rank 0 left: original rank 1 is now at index 0; an idle rank (-1) is not counted.
  EXPECT_EQ(w.observe(std::vector<double>{30, 10, 10, -1}, std::vector<int>{1, 2, 3, 5}), (std::vector<int>{1}));
  EXPECT_DOUBLE_EQ(w.slowdown(5), 0);
  // Two ranks: each against the other (the median of both would hold the slow one).
  ft::StragglerWatch two(1.5, 1);
  EXPECT_EQ(two.observe(std::vector<double>{10, 16}, std::vector<int>{0, 1}), (std::vector<int>{1}));
  EXPECT_DOUBLE_EQ(two.slowdown(1), 1.6);
  // One rank counted: nothing to compare with.
  ft::StragglerWatch one(2.0, 1);
  EXPECT_TRUE(one.observe(std::vector<double>{50, -1}, std::vector<int>{0, 1}).empty());
}

TEST(StragglerWatch, EvictionPaysOnlyWhenPredictedFaster) {
  // 4 ranks at 10 ms, one at 30: 3 ranks would take 13.3 ms.
  EXPECT_NEAR(ft::predicted_step_without(10, 4), 13.333, 1e-3);
  EXPECT_TRUE(ft::evict_pays(30, 10, 4));
  // 2 ranks, one at 15: alone the other takes 20 ms: staying is faster.
  EXPECT_FALSE(ft::evict_pays(15, 10, 2));
  EXPECT_FALSE(ft::evict_pays(30, 10, 1));
}

// --evict-stragglers' policy: the part must live on in another model replica; a newcomer always
// takes the place; without one only dp, and only when n - 1 ranks are predicted faster.
TEST(StragglerWatch, EvictionDecision) {
  // pp or tp with one model replica: never, even with a spare.
  auto d = ft::decide_eviction(30, 10, 4, /*replicas=*/1, /*model=*/4, "hot spare");
  EXPECT_FALSE(d.evict);
  EXPECT_EQ(d.why, "; not evicted: no other model replica holds its part");
  d = ft::decide_eviction(12, 10, 4, 4, 1, "respawned process");  // barely slow, but replaced: goes
  EXPECT_TRUE(d.evict);
  EXPECT_EQ(d.why, "; evicting it: a respawned process takes its place");
  d = ft::decide_eviction(30, 10, 4, 2, 2, "");  // a hybrid without a newcomer: its replica would shrink
  EXPECT_FALSE(d.evict);
  EXPECT_EQ(d.why, "; not evicted: no hot spare or respawn to take its place in its model replica");
  d = ft::decide_eviction(30, 10, 4, 4, 1, "");
  EXPECT_TRUE(d.evict);
  EXPECT_EQ(d.why, "; evicting it: predicted 13.33 ms per step on 3 ranks against 30.00 ms now");
  d = ft::decide_eviction(15, 10, 2, 2, 1, "");
  EXPECT_FALSE(d.evict);
  EXPECT_EQ(d.why, "; not evicted: predicted 20.00 ms per step on 1 ranks, no faster than 15.00 ms now");
}

}  // namespace
