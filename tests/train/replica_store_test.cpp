// The model-parallel driver's replica store and restore planner (train/replica_store.hpp), for
// both unit families: pp's layers (UnitKey{layer, L}) and tp's shards (UnitKey{rank, n}).
#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"
#include "ftcc/train/replica_store.hpp"

namespace ftcc::train {
namespace {

Holding layer(int l, std::int64_t step, int L = 4) { return {step, {l, L}}; }

TEST(RestorePlan, NewestCompleteStepWins) {
  // 4 layers; old stages rank0:{0}, rank1:{1}, rank2:{2}, rank3:{3}; rank 2 died. Survivors (new
  // ranks 0,1,2 = old 0,1,3) hold their own layers at steps 8 and 10; rank 3 (new 2) holds old
  // rank 2's layer 2 as a replica only at step 8 (the step-10 copy never arrived).
  std::vector<std::vector<Holding>> h = {
      {layer(0, 8), layer(0, 10), layer(3, 8), layer(3, 10)},  // old rank 0 also holds old rank 3's layer (ring)
      {layer(1, 8), layer(1, 10), layer(0, 8), layer(0, 10)},
      {layer(3, 8), layer(3, 10), layer(2, 8)},
  };
  auto plan = plan_restore(h, 4);
  EXPECT_EQ(plan.step, 8);
  EXPECT_EQ(plan.of, 4);
  EXPECT_EQ(plan.holder, (std::vector<int>{0, 1, 2, 0}));
  h[2].push_back(layer(2, 10));
  plan = plan_restore(h, 4);
  EXPECT_EQ(plan.step, 10);
  EXPECT_TRUE(plan.lost.empty());
}

TEST(RestorePlan, RankAndBuddyLostNamesTheUnits) {
  // 7 layers over 4 ranks (0-1, 2-3, 4-5, 6); ranks 1 and 2 died: layers 2-3 (rank 1's) were
  // replicated only on rank 2.
  std::vector<std::vector<Holding>> h = {
      {layer(0, 4, 7), layer(1, 4, 7), layer(6, 4, 7)},
      {layer(6, 4, 7), layer(4, 4, 7), layer(5, 4, 7)},
  };
  auto plan = plan_restore(h, 7);
  EXPECT_EQ(plan.step, -1);
  EXPECT_EQ(plan.lost, (std::vector<int>{2, 3}));
  EXPECT_EQ(plan_restore({{}, {}}, 2).lost, (std::vector<int>{0, 1}));
}

TEST(RestorePlan, SplitsOfOneStepPreferTheLargerAndNeverMix) {
  // tp: at step 20 the model was re-split from 4 shards to 3 (rollback, then replicas at once).
  // Shards of different splits never complete each other: {0,1 of 4} + {2 of 3} is nothing.
  std::vector<std::vector<Holding>> h = {
      {{20, {0, 4}}, {20, {1, 4}}, {20, {0, 3}}},
      {{20, {2, 3}}, {20, {1, 3}}},
  };
  auto plan = plan_restore(h, 3);
  EXPECT_EQ(plan.step, 20);
  EXPECT_EQ(plan.of, 3);
  EXPECT_EQ(plan.holder, (std::vector<int>{0, 1, 1}));
  h[1].push_back({20, {2, 4}});
  h[1].push_back({20, {3, 4}});
  plan = plan_restore(h, 3);
  EXPECT_EQ(plan.of, 4);  // both complete at step 20: the larger split
  EXPECT_EQ(plan.holder, (std::vector<int>{0, 0, 1, 1}));
  // A newer but incomplete split loses to an older complete one.
  h[0].push_back({25, {0, 3}});
  EXPECT_EQ(plan_restore(h, 3).step, 20);
  // Malformed entries (index outside 0..of-1) are ignored, never indexed.
  EXPECT_EQ(plan_restore({{{30, {5, 2}}, {30, {-1, 2}}}}, 2).lost, (std::vector<int>{0, 1}));
}

TEST(ReplicaStore, KeepsTheNewestStepsAndEncodesEveryEntry) {
  ReplicaStore s;
  for (std::int64_t step : {5, 10, 15})
    for (int u = 0; u < 2; ++u) s.put(step, {u, 2}, Bytes(4 * static_cast<std::size_t>(u + 1)));
  s.keep_newest(2);
  EXPECT_EQ(s.oldest(), 10);
  EXPECT_EQ(s.bytes(), 2u * (4 + 8));
  EXPECT_EQ(s.encode(), (std::vector<std::int64_t>{15, 0, 2, 15, 1, 2, 10, 0, 2, 10, 1, 2}));
  EXPECT_EQ(s.get(15, {1, 2})->size(), 8u);
  EXPECT_THROW(s.get(5, {0, 2}), ftcc::Error);
  s.drop_after(10);
  EXPECT_EQ(s.encode(), (std::vector<std::int64_t>{10, 0, 2, 10, 1, 2}));
  s.clear();
  EXPECT_EQ(s.oldest(), -1);
}

// A live unit offered to a restore: listed like any copy, packed only when read, and dropped
// unread once the live state is about to change (drop_unmade keeps what was read).
TEST(ReplicaStore, LazyEntriesAreMadeOnlyWhenRead) {
  ReplicaStore st;
  int made = 0;
  const auto pack = [&](std::byte v) {
    return [&made, v] {
      ++made;
      return Bytes(3, v);
    };
  };
  st.put(4, {0, 2}, Bytes(2, std::byte{1}));
  st.put_lazy(5, {0, 2}, pack(std::byte{7}));
  st.put_lazy(5, {1, 2}, pack(std::byte{8}));
  EXPECT_EQ(st.encode(), (std::vector<std::int64_t>{5, 0, 2, 5, 1, 2, 4, 0, 2}));
  EXPECT_TRUE(st.has(5, {1, 2}));
  EXPECT_EQ(made, 0);
  EXPECT_EQ(st.bytes(), 2u);
  EXPECT_TRUE(st.made(4, {0, 2}));  // made: bytes held (a restore sends the live state unpacked otherwise)
  EXPECT_FALSE(st.made(5, {1, 2}));
  EXPECT_FALSE(st.made(7, {1, 2}));
  EXPECT_EQ(*st.get(5, {1, 2}), Bytes(3, std::byte{8}));
  EXPECT_TRUE(st.made(5, {1, 2}));
  EXPECT_EQ(*st.get(5, {1, 2}), Bytes(3, std::byte{8}));
  EXPECT_EQ(made, 1);
  EXPECT_EQ(st.bytes(), 5u);
  st.drop_unmade();
  EXPECT_FALSE(st.has(5, {0, 2}));
  EXPECT_TRUE(st.has(5, {1, 2}) && st.has(4, {0, 2}));
  EXPECT_EQ(made, 1);
  st.put_lazy(6, {0, 1}, pack(std::byte{9}));
  st.drop_unmade();  // a step left with nothing is gone
  EXPECT_EQ(st.encode(), (std::vector<std::int64_t>{5, 1, 2, 4, 0, 2}));
}

}  // namespace
}  // namespace ftcc::train
