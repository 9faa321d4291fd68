// tests/train/partition_test.cpp: pipeline partitioning and the post-failure restore plan
// (train/partition.hpp), without MPI.
#include "ftcc/train/partition.hpp"

#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"

#include <algorithm>
#include <numeric>

using namespace ftcc::train;

namespace {

std::int64_t max_stage(const std::vector<std::int64_t>& cost, const std::vector<int>& b) {
  std::int64_t m = 0;
  for (std::size_t s = 0; s + 1 < b.size(); ++s)
    m = std::max(m, std::accumulate(cost.begin() + b[s], cost.begin() + b[s + 1], std::int64_t{0}));
  return m;
}

// Brute force over all cuts: the smallest possible largest stage.
std::int64_t brute(const std::vector<std::int64_t>& cost, int parts) {
  const int L = static_cast<int>(cost.size());
  std::int64_t best = INT64_MAX;
  for (unsigned mask = 0; mask < (1u << (L - 1)); ++mask) {
    if (__builtin_popcount(mask) != parts - 1) continue;
    std::vector<int> b{0};
    for (int i = 1; i < L; ++i)
      if (mask & (1u << (i - 1))) b.push_back(i);
    b.push_back(L);
    best = std::min(best, max_stage(cost, b));
  }
  return best;
}

void expect_valid(const std::vector<int>& b, int L, int parts) {
  ASSERT_EQ(b.size(), static_cast<size_t>(parts) + 1);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), L);
  for (std::size_t s = 0; s + 1 < b.size(); ++s) EXPECT_LT(b[s], b[s + 1]) << "stage " << s << " is empty";
}

}  // namespace

TEST(Partition, LayerCostsAreParameterCounts) {
  EXPECT_EQ(layer_costs({64, 32, 10}), (std::vector<std::int64_t>{64 * 32 + 32, 32 * 10 + 10}));
}

TEST(Partition, SevenLayersOverFourThreeTwoRanks) {
  // 7 equal layers: 4 ranks -> 2,2,2,1; 3 -> 3,2,2; 2 -> 4,3; all contiguous and covering.
  const std::vector<std::int64_t> cost(7, 100);
  const auto b4 = partition_layers(cost, 4), b3 = partition_layers(cost, 3), b2 = partition_layers(cost, 2);
  expect_valid(b4, 7, 4);
  expect_valid(b3, 7, 3);
  expect_valid(b2, 7, 2);
  EXPECT_EQ(max_stage(cost, b4), 200);
  EXPECT_EQ(max_stage(cost, b3), 300);
  EXPECT_EQ(max_stage(cost, b2), 400);
  EXPECT_EQ(stage_of(b3, 0), 0);
  EXPECT_EQ(stage_of(b3, 6), 2);
}

TEST(Partition, BalancedByParameterCountAndOptimal) {
  // An MLP with one wide layer: the wide layer gets a stage of its own.
  const auto cost = layer_costs({64, 256, 32, 32, 32, 32, 10});
  for (int parts = 1; parts <= 6; ++parts) {
    const auto b = partition_layers(cost, parts);
    expect_valid(b, 6, parts);
    EXPECT_EQ(max_stage(cost, b), brute(cost, parts)) << parts << " stages";
  }
  for (std::uint32_t seed = 1; seed < 40; ++seed) {  // random costs vs brute force
    std::vector<std::int64_t> c;
    std::uint32_t x = seed;
    for (int i = 0; i < 9; ++i) c.push_back((x = x * 1103515245u + 12345u) % 1000 + 1);
    for (int parts = 1; parts <= 9; ++parts) EXPECT_EQ(max_stage(c, partition_layers(c, parts)), brute(c, parts));
  }
}

TEST(Partition, OneRankPerLayerAndRejectsTooManyRanks) {
  const std::vector<std::int64_t> cost{5, 1, 7};
  EXPECT_EQ(partition_layers(cost, 3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(partition_layers(cost, 1), (std::vector<int>{0, 3}));
  EXPECT_THROW(partition_layers(cost, 4), ftcc::Error);
}

