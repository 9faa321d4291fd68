// The quorum rule (recovery/quorum_rule.hpp) on its own: majorities, exactly half, minorities,
// the multi-host cases that only tests/reliability/multihost.py (root, network namespaces)
// exercises end to end, one host, ties, and a sweep showing two sides never both go on.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/recovery/quorum_lost.hpp"
#include "ftcc/recovery/quorum_rule.hpp"

namespace fr = ftcc::recovery;

namespace {

// One side's view of a job of n ranks: `survivors` remain, every other rank is lost, and
// `confirmed` of the lost were confirmed dead by a survivor on their host.
fr::QuorumInput side(int n, std::vector<int> survivors, std::vector<int> confirmed = {}) {
  fr::QuorumInput in;
  in.survivors = std::move(survivors);
  for (int r = 0; r < n; ++r)
    if (std::find(in.survivors.begin(), in.survivors.end(), r) == in.survivors.end()) in.lost.push_back(r);
  in.confirmed = std::move(confirmed);
  return in;
}

// Ranks [first, first + count).
std::vector<int> ranks(int first, int count) {
  std::vector<int> v(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) v[static_cast<size_t>(i)] = first + i;
  return v;
}

}  // namespace

TEST(QuorumRule, StrictMajorityGoesOn) {
  const auto d = fr::decide_quorum(side(5, {0, 1, 3}));
  EXPECT_TRUE(d.go_on);
  EXPECT_EQ(d.old_size, 5);
  EXPECT_EQ(d.eligible, 5);
  EXPECT_EQ(d.unconfirmed, (std::vector<int>{2, 4}));
  EXPECT_EQ(d.reason, "quorum kept: 3 of 5 ranks remain, a strict majority of the 5 not confirmed dead");
}

TEST(QuorumRule, ExactlyHalfStops) {
  const auto d = fr::decide_quorum(side(4, {0, 1}));
  EXPECT_FALSE(d.go_on);
  EXPECT_EQ(d.eligible, 4);
  EXPECT_EQ(d.unconfirmed, (std::vector<int>{2, 3}));
  EXPECT_EQ(d.reason.rfind("quorum lost: 2 of 4 ranks (0,1) remain after losing ranks 2,3, and the loss of 2,3 "
                           "could not be confirmed", 0), 0u)
      << d.reason;
}

TEST(QuorumRule, MinorityStops) {
  EXPECT_FALSE(fr::decide_quorum(side(6, {4, 5})).go_on);
  EXPECT_FALSE(fr::decide_quorum(side(7, {0, 1, 2})).go_on);
  EXPECT_TRUE(fr::decide_quorum(side(7, {0, 1, 2, 3})).go_on);
}

TEST(QuorumRule, ConfirmedDeathsAreCountedOut) {
  // 3 of 6 is half, but with rank 1's death confirmed the base is 5: 3 > 2.5.
  const auto d = fr::decide_quorum(side(6, {0, 2, 3}, {1}));
  EXPECT_TRUE(d.go_on);
  EXPECT_EQ(d.eligible, 5);
  EXPECT_EQ(d.unconfirmed, (std::vector<int>{4, 5}));
}

// 3 hosts x 2 ranks (rank r on host r / 2), as in tests/reliability/multihost.py.
TEST(QuorumRule, MultiHostPartitionOnlyTheMajoritySideGoesOn) {
  // h3 (ranks 4, 5) cut off: h1+h2 keep 4 of 6; h3's side keeps 2 of 6. Nobody can confirm a
  // death on another host.
  EXPECT_TRUE(fr::decide_quorum(side(6, ranks(0, 4))).go_on);
  EXPECT_FALSE(fr::decide_quorum(side(6, ranks(4, 2))).go_on);
  // h3 cut off while rank 1 crashes on h1 (rank 0 confirms it): 3 of 5 eligible, goes on.
  EXPECT_TRUE(fr::decide_quorum(side(6, {0, 2, 3}, {1})).go_on);
  // h2 and h3 cut off: 2 of 6, stops.
  EXPECT_FALSE(fr::decide_quorum(side(6, ranks(0, 2))).go_on);
}

TEST(QuorumRule, MultiHostRankZerosHostAloneStops) {
  // Only the host of rank 0 remains (its own ranks alive): no rank is special, 2 of 6 stops;
  // it goes on only if the other hosts' deaths were confirmed, which from another host they
  // cannot be.
  const auto d = fr::decide_quorum(side(6, {0, 1}));
  EXPECT_FALSE(d.go_on);
  EXPECT_EQ(d.unconfirmed, ranks(2, 4));
  // Hosts 2 and 3 cut off and rank 1 crashed: rank 0 confirms rank 1 only, 1 of 5 stops.
  EXPECT_FALSE(fr::decide_quorum(side(6, {0}, {1})).go_on);
}

TEST(QuorumRule, OneHostEveryDeathConfirmedAnySurvivorGoesOn) {
  // On one host every lost rank is confirmed: the last survivor of 4 goes on alone.
  const auto alone = fr::decide_quorum(side(4, {2}, {0, 1, 3}));
  EXPECT_TRUE(alone.go_on);
  EXPECT_EQ(alone.eligible, 1);
  EXPECT_TRUE(alone.unconfirmed.empty());
  EXPECT_TRUE(fr::decide_quorum(side(4, {0, 1}, {2, 3})).go_on);
  // A single-rank job that lost nothing (no recovery would run, but the rule holds).
  EXPECT_TRUE(fr::decide_quorum(side(1, {0})).go_on);
}

TEST(QuorumRule, TiesStopBothSides) {
  // 2 hosts x 2 ranks cut in halves (multihost.py's "quorum" case): both sides stop.
  EXPECT_FALSE(fr::decide_quorum(side(4, {0, 1})).go_on);
  EXPECT_FALSE(fr::decide_quorum(side(4, {2, 3})).go_on);
  // 2 hosts x 3 ranks, rank 2 crashed on host A and the hosts then cut apart: A confirms rank 2
  // (2 of 5 eligible), B cannot (3 of 6): a tie after counting out, both stop.
  EXPECT_FALSE(fr::decide_quorum(side(6, {0, 1}, {2})).go_on);
  EXPECT_FALSE(fr::decide_quorum(side(6, {3, 4, 5})).go_on);
}

// Every way to split up to 7 ranks into side A, side B and dead ranks D, with each side
// confirming any subset of D: never do both sides go on.
TEST(QuorumRule, TwoSidesNeverBothGoOn) {
  int cases = 0;
  for (int n = 1; n <= 7; ++n) {
    int pow3 = 1;
    for (int i = 0; i < n; ++i) pow3 *= 3;
    for (int code = 0; code < pow3; ++code) {
      std::vector<int> a, b, dead;
      for (int r = 0, c = code; r < n; ++r, c /= 3) (c % 3 == 0 ? a : c % 3 == 1 ? b : dead).push_back(r);
      if (a.empty() || b.empty()) continue;
      const int subsets = 1 << dead.size();
      for (int ca = 0; ca < subsets; ++ca)
        for (int cb = 0; cb < subsets; ++cb) {
          std::vector<int> conf_a, conf_b;
          for (size_t i = 0; i < dead.size(); ++i) {
            if ((ca >> i) & 1) conf_a.push_back(dead[i]);
            if ((cb >> i) & 1) conf_b.push_back(dead[i]);
          }
          const bool both = fr::decide_quorum(side(n, a, conf_a)).go_on && fr::decide_quorum(side(n, b, conf_b)).go_on;
          ASSERT_FALSE(both) << "n " << n << " code " << code << " ca " << ca << " cb " << cb;
          ++cases;
        }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(QuorumRule, QuorumLostCarriesTheReason) {
  const auto in = side(6, {0, 1}, {});
  const auto d = fr::decide_quorum(in);
  ASSERT_FALSE(d.go_on);
  const fr::QuorumLost q(in.survivors, in.lost, d.unconfirmed, d.old_size);
  EXPECT_EQ(std::string(q.what()), d.reason);
}

TEST(QuorumRule, InconsistentInputIsRefused) {
  fr::QuorumInput both{{0, 1}, {1, 2}, {}};
  EXPECT_THROW(fr::decide_quorum(both), ftcc::InternalError);
  fr::QuorumInput stray{{0, 1}, {2}, {3}};
  EXPECT_THROW(fr::decide_quorum(stray), ftcc::InternalError);
  fr::QuorumInput twice{{0, 0}, {2}, {}};
  EXPECT_THROW(fr::decide_quorum(twice), ftcc::InternalError);
}
