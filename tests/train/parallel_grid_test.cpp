// train/parallel_grid.hpp: the layout of replicas x model ranks and the grid survivors re-form.
#include "ftcc/train/parallel_grid.hpp"

#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"

namespace ftcc::train {
namespace {

TEST(ParallelGrid, Layout) {
  const ParallelGrid g{7, 2, 3};
  EXPECT_EQ(g.active(), 6);
  EXPECT_TRUE(g.is_active(5));
  EXPECT_FALSE(g.is_active(6));
  EXPECT_EQ(g.replica_of(5), 2);
  EXPECT_EQ(g.position_of(5), 1);
  EXPECT_EQ(g.replica_ranks(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(g.position_ranks(1), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(g.describe(), "3 replicas x 2 ranks, 1 idle");
  // The replicas' rows cover the batch once, in order.
  std::int64_t next = 0;
  for (int k = 0; k < 3; ++k) {
    const auto [b, e] = g.rows_of(k, 64);
    EXPECT_EQ(b, next);
    EXPECT_GE(e - b, 21);
    next = e;
  }
  EXPECT_EQ(next, 64);
}

TEST(ParallelGrid, MicroBatchesPerReplica) {
  // Each replica cuts its own rows: 64 rows over 3 replicas (21, 21, 22), 4 micro-batches each.
  const ParallelGrid g{6, 2, 3};
  const auto m = g.micro_batches_of(2, 64, 4, /*shared=*/false);
  EXPECT_EQ(m.begin, 42);
  EXPECT_EQ(m.end, 64);
  EXPECT_EQ(m.cuts, (std::vector<std::int64_t>{0, 5, 11, 16, 22}));
  // Fewer rows than micro-batches: one row each.
  EXPECT_EQ(g.micro_batches_of(0, 5, 4, false).cuts, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(g.micro_batches_of(0, 0, 4, false).cuts, (std::vector<std::int64_t>{0}));
}

TEST(ParallelGrid, SharedMicroBatchesAreTheSameOnEveryGrid) {
  // --deterministic: the global batch's micro-batches (64 rows in 6: cuts at 0, 10, 21, 32, 42,
  // 53, 64) are dealt out whole, so each one has the same rows whatever the grid.
  const std::vector<std::int64_t> global{0, 10, 21, 32, 42, 53, 64};
  for (int replicas = 1; replicas <= 6; ++replicas) {
    const ParallelGrid g{replicas * 2, 2, replicas};
    std::vector<std::int64_t> seen{0};
    for (int k = 0; k < replicas; ++k) {
      const auto m = g.micro_batches_of(k, 64, 6, /*shared=*/true);
      EXPECT_EQ(m.begin, seen.back()) << replicas << " replicas, replica " << k;
      EXPECT_EQ(m.cuts.front(), 0);
      EXPECT_EQ(m.begin + m.cuts.back(), m.end);
      for (std::size_t j = 1; j < m.cuts.size(); ++j) seen.push_back(m.begin + m.cuts[j]);
    }
    EXPECT_EQ(seen, global) << replicas << " replicas";
  }
  // More replicas than micro-batches: some replicas get none (and no rows).
  const ParallelGrid g{8, 2, 4};
  const auto none = g.micro_batches_of(0, 64, 2, true);
  EXPECT_EQ(none.begin, none.end);
  EXPECT_EQ(none.cuts, (std::vector<std::int64_t>{0}));
  EXPECT_EQ(g.micro_batches_of(3, 64, 2, true).cuts, (std::vector<std::int64_t>{0, 32}));
}

TEST(ParallelGrid, StartIsTheAskedGrid) {
  EXPECT_EQ(choose_grid(8, 2, 5, 64), (ParallelGrid{8, 2, 4}));
  EXPECT_EQ(choose_grid(8, 4, 5, 64), (ParallelGrid{8, 4, 2}));
  EXPECT_EQ(choose_grid(4, 4, 5, 64), (ParallelGrid{4, 4, 1}));  // pure pp or tp
  EXPECT_EQ(choose_grid(4, 1, 5, 64), (ParallelGrid{4, 1, 4}));
}

TEST(ParallelGrid, AfterAFailure) {
  // Pure pp/tp (one replica of 4): the survivors re-cut the model, as before grids existed.
  EXPECT_EQ(choose_grid(3, 4, 5, 64), (ParallelGrid{3, 3, 1}));
  // 2 x 2, one lost: 3 ranks busy as one replica of 3 (not 3 replicas of the whole model:
  // no rank holds more of the model than the user asked for).
  EXPECT_EQ(choose_grid(3, 2, 5, 64), (ParallelGrid{3, 3, 1}));
  // ...unless the model cannot be cut into 3: one replica of 2, 1 idle (never 3 whole models).
  EXPECT_EQ(choose_grid(3, 2, 2, 64), (ParallelGrid{3, 2, 1}));
  // 4 x 2, one lost: 7 ranks: 3 replicas of 2 (1 idle) or 2 of 3 (1 idle): the smaller model.
  EXPECT_EQ(choose_grid(7, 2, 5, 64), (ParallelGrid{7, 2, 3}));
  // 2 x 4, a whole replica lost: one replica of 4.
  EXPECT_EQ(choose_grid(4, 4, 5, 64), (ParallelGrid{4, 4, 1}));
  // 2 x 4, one lost: 7 ranks: one replica of 5 (the most a 5-layer model allows), 2 idle, against
  // one of 4 (3 idle): 5 busy.
  EXPECT_EQ(choose_grid(7, 4, 5, 64), (ParallelGrid{7, 5, 1}));
  // Replicas never outnumber the batch's rows.
  EXPECT_EQ(choose_grid(6, 1, 1, 4), (ParallelGrid{6, 1, 4}));
  // Fewer ranks than the model size: one replica over all of them.
  EXPECT_EQ(choose_grid(2, 4, 5, 64), (ParallelGrid{2, 2, 1}));
}

TEST(ParallelGrid, APipelineCountsItsBubble) {
  // 4 x 2 stages, one lost, 8 micro-batches: 3 replicas of 2 stages (6 busy, bubble 1/9: 5.33)
  // rather than one pipeline of 7 (7 busy, bubble 6/14: 4); a tp group has no bubble: 7 busy.
  EXPECT_EQ(choose_grid(7, 2, 8, 256, 8), (ParallelGrid{7, 2, 3}));
  EXPECT_EQ(choose_grid(7, 2, 8, 256), (ParallelGrid{7, 7, 1}));
  // 2 x 2, one lost, 4 micro-batches: one pipeline of 3 (3 x 4/6 = 2) beats one of 2 (2 x 4/5).
  EXPECT_EQ(choose_grid(3, 2, 5, 64, 4), (ParallelGrid{3, 3, 1}));
  // The micro-batches are at most a replica's rows: 2 x 2 over a batch of 2 rows...
  EXPECT_EQ(choose_grid(4, 2, 4, 2, 8), (ParallelGrid{4, 2, 2}));
  // ...and at the start the asked grid scores highest whatever the micro-batches.
  for (std::int64_t mb : {1, 2, 4, 16}) EXPECT_EQ(choose_grid(8, 2, 8, 64, mb), (ParallelGrid{8, 2, 4})) << mb;
}

TEST(ParallelGrid, RefusesNonsense) {
  EXPECT_THROW(choose_grid(0, 2, 5, 64), ftcc::Error);
  EXPECT_THROW(choose_grid(4, 2, 0, 64), ftcc::Error);
  EXPECT_THROW(choose_grid(4, 2, 4, 64, -1), ftcc::Error);
}

}  // namespace
}  // namespace ftcc::train
