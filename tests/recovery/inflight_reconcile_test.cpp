// reconcile_inflight (recovery/inflight_reconcile.hpp) with ranks as threads over MemoryTransport:
// each case gives every "survivor" the done sequence number and held results a failure left it
// with, and checks who adopts what.
#include "ftcc/recovery/inflight_reconcile.hpp"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "../comm/thread_ranks.hpp"

namespace {

using ftcc::recovery::HeldResult;
using ftcc::recovery::InflightView;
using ftcc::recovery::ReconcileOutcome;

// The result of collective #s: 4 floats, the same on every rank.
std::vector<float> result_of(std::int64_t s) { return {float(s), float(s) + 0.5f, -float(s), 7.0f}; }

struct Rank {
  std::int64_t done = -1;
  bool exact = true;
  std::int64_t held_from = 0;               // holds results of [held_from, done]
  std::map<std::int64_t, bool> unshareable;  // seqs whose result differs per rank
  std::int64_t pending_bytes = 16;          // what its own calls expect
  std::int64_t blocked = -1;                // a call past hi that cannot run again
  int why_not_code = 1;                     // its reason when not exact
  bool texts = false;                       // give why_not_text
};

struct Seen {
  ReconcileOutcome out;
  std::map<std::int64_t, std::vector<float>> adopted;
};

std::vector<Seen> run(const std::vector<Rank>& ranks) {
  std::vector<Seen> seen(ranks.size());
  std::vector<std::vector<std::vector<float>>> store(ranks.size());
  ftcc_test::run_ranks(static_cast<int>(ranks.size()), [&](ftcc::comm::Communicator& c) {
    const Rank& me = ranks[static_cast<std::size_t>(c.rank())];
    auto& mine = store[static_cast<std::size_t>(c.rank())];
    InflightView v;
    v.done = me.done;
    v.exact = me.exact;
    v.why_not_code = me.why_not_code;
    if (me.texts)
      v.why_not_text = [](int rank, int code) { return "rank " + std::to_string(rank) + " code " + std::to_string(code); };
    v.held = [&](std::int64_t s) {
      HeldResult h;
      if (s < me.held_from || s > me.done) return h;
      mine.push_back(result_of(s));
      h.held = true;
      h.shareable = !me.unshareable.count(s);
      h.data = mine.back().data();
      h.bytes = 16;
      return h;
    };
    v.expects = [&](std::int64_t) { return me.pending_bytes; };
    v.cannot_redo = [&](std::int64_t) { return me.blocked; };
    Seen& s = seen[static_cast<std::size_t>(c.rank())];
    v.adopt = [&](std::int64_t seq, const void* data, std::size_t bytes) {
      const auto* f = static_cast<const float*>(data);
      s.adopted[seq] = std::vector<float>(f, f + bytes / sizeof(float));
    };
    s.out = ftcc::recovery::reconcile_inflight(c, v);
  });
  return seen;
}

TEST(InflightReconcile, AllCompletedTheSameCallsNothingMoves) {
  auto s = run({{.done = 5, .held_from = 5}, {.done = 5, .held_from = 5}, {.done = 5, .held_from = 5}});
  for (const auto& x : s) {
    EXPECT_TRUE(x.out.exact);
    EXPECT_EQ(x.out.lo, 5);
    EXPECT_EQ(x.out.hi, 5);
    EXPECT_EQ(x.out.source, -1);
    EXPECT_TRUE(x.adopted.empty());
  }
}

TEST(InflightReconcile, TheRanksBehindTakeTheResultOfTheOneAhead) {
  // Rank 1 completed #6 (a ring's last block reached it), ranks 0 and 2 did not.
  auto s = run({{.done = 5, .held_from = 5}, {.done = 6, .held_from = 5}, {.done = 5, .held_from = 4}});
  for (const auto& x : s) {
    EXPECT_TRUE(x.out.exact) << x.out.why_not;
    EXPECT_EQ(x.out.lo, 5);
    EXPECT_EQ(x.out.hi, 6);
    EXPECT_EQ(x.out.source, 1);
  }
  EXPECT_EQ(s[0].adopted.size(), 1u);
  EXPECT_EQ(s[0].adopted.at(6), result_of(6));
  EXPECT_EQ(s[2].adopted.at(6), result_of(6));
  EXPECT_TRUE(s[1].adopted.empty());
  EXPECT_EQ(s[0].out.adopted, 1);
  EXPECT_EQ(s[1].out.adopted, 0);
}

TEST(InflightReconcile, SeveralCallsAheadComeInOrderFromTheLowestMostAdvancedRank) {
  // Broadcasts from the ranks ahead can complete without the others: 3 calls apart.
  auto s = run({{.done = 2, .held_from = 2}, {.done = 5, .held_from = 3}, {.done = 5, .held_from = 3},
                {.done = 3, .held_from = 3}});
  EXPECT_EQ(s[0].out.source, 1);
  EXPECT_EQ(s[0].adopted.size(), 3u);
  for (std::int64_t q = 3; q <= 5; ++q) EXPECT_EQ(s[0].adopted.at(q), result_of(q));
  EXPECT_EQ(s[3].adopted.size(), 2u);
  EXPECT_EQ(s[3].adopted.at(4), result_of(4));
  EXPECT_TRUE(s[1].adopted.empty() && s[2].adopted.empty());
}

TEST(InflightReconcile, AResultThatDiffersPerRankIsNotTakenAnywhere) {
  Rank ahead{.done = 6, .held_from = 5};
  ahead.unshareable[6] = true;  // a reduce_scatter: rank 1's block is not rank 0's
  auto s = run({{.done = 5, .held_from = 5}, ahead, {.done = 5, .held_from = 5}});
  for (const auto& x : s) {
    EXPECT_FALSE(x.out.exact);
    EXPECT_NE(x.out.why_not.find("collective #6"), std::string::npos) << x.out.why_not;
    EXPECT_TRUE(x.adopted.empty());
  }
  EXPECT_EQ(s[0].out.why_not, s[2].out.why_not);
}

TEST(InflightReconcile, TheLowestInexactRanksReasonNamesTheOutcomeEverywhere) {
  auto s = run({{.done = 5, .held_from = 5, .texts = true},
                {.done = 5, .exact = false, .why_not_code = 7, .texts = true},
                {.done = 5, .exact = false, .why_not_code = 3, .texts = true}});
  for (const auto& x : s) {
    EXPECT_FALSE(x.out.exact);
    EXPECT_EQ(x.out.why_not, "rank 1 code 7");
  }
  // Without a text: the generic line, naming the rank.
  auto g = run({{.done = 5, .held_from = 5}, {.done = 5, .held_from = 5}, {.done = 5, .exact = false}});
  EXPECT_EQ(g[0].out.why_not, "rank 2 of the survivors cannot reconcile its operations");
}

TEST(InflightReconcile, ARankThatCannotReconcileStopsEveryRankTheSameWay) {
  auto s = run({{.done = 5, .held_from = 5}, {.done = 6, .held_from = 5}, {.done = 5, .exact = false}});
  for (const auto& x : s) {
    EXPECT_FALSE(x.out.exact);
    EXPECT_EQ(x.out.why_not, s[0].out.why_not);
    EXPECT_TRUE(x.adopted.empty());
  }
}

TEST(InflightReconcile, MismatchedCallsAreFoundOnEveryRank) {
  Rank behind{.done = 5, .held_from = 5};
  behind.pending_bytes = 32;  // its call #6 is another size: the program made different calls
  auto s = run({behind, {.done = 6, .held_from = 5}, {.done = 5, .held_from = 5}});
  for (const auto& x : s) {
    EXPECT_FALSE(x.out.exact);
    EXPECT_NE(x.out.why_not.find("disagree on collective #6"), std::string::npos) << x.out.why_not;
    EXPECT_TRUE(x.adopted.empty());
  }
}

TEST(InflightReconcile, ARankThatNoLongerHoldsTheResultMakesItInexact) {
  auto s = run({{.done = 4, .held_from = 4}, {.done = 6, .held_from = 6}});  // #5 dropped too early
  for (const auto& x : s) EXPECT_FALSE(x.out.exact);
  EXPECT_NE(s[0].out.why_not.find("no longer held"), std::string::npos);
}

TEST(InflightReconcile, ACallThatCannotRunAgainOnFewerRanksStopsEveryRank) {
  // Nobody completed #6, and rank 2's #6 is an allgather made for the old size.
  Rank blocked{.done = 5, .held_from = 5};
  blocked.blocked = 6;
  auto s = run({{.done = 5, .held_from = 5}, {.done = 5, .held_from = 5}, blocked});
  for (const auto& x : s) {
    EXPECT_FALSE(x.out.exact);
    EXPECT_NE(x.out.why_not.find("collective #6 completed nowhere"), std::string::npos) << x.out.why_not;
  }
}

TEST(InflightReconcile, ACallNotMadeYetTakesItsResultLater) {
  // Rank 0 has not reached #6 yet (expects -1): it still receives the result to keep.
  Rank later{.done = 5, .held_from = 5};
  later.pending_bytes = -1;
  auto s = run({later, {.done = 6, .held_from = 6}});
  EXPECT_TRUE(s[0].out.exact) << s[0].out.why_not;
  EXPECT_EQ(s[0].adopted.at(6), result_of(6));
}

TEST(InflightReconcile, ASingleSurvivorHasNothingToReconcile) {
  auto s = run({{.done = 9, .held_from = 9}});
  EXPECT_TRUE(s[0].out.exact);
  EXPECT_EQ(s[0].out.source, -1);
}

}  // namespace
