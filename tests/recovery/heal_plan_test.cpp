// tests/recovery/heal_plan_test.cpp: which spare takes which lost slot (recovery/heal_plan.hpp).
#include "ftcc/recovery/heal_plan.hpp"

#include <gtest/gtest.h>

namespace ftcc::recovery {
namespace {

using V = std::vector<int>;

TEST(HealPlan, ASpareTakesTheLostSlot) {
  // 4 training ranks (slots 0-3) and spares 4, 5; rank 1 is lost.
  const HealPlan p = plan_heal({0, 1, 2, 3, kSpare, kSpare}, {0, 2, 3, 4, 5});
  EXPECT_EQ(p.slots, (V{0, kGone, 2, 3, 1, kSpare}));
  EXPECT_EQ(p.joined, V{4});
  EXPECT_EQ(p.filled_slots, V{1});
  EXPECT_TRUE(p.dropped_slots.empty());
  EXPECT_EQ(p.spares_left, 1);
  EXPECT_FALSE(p.state_lost);
  EXPECT_EQ(training_members(p.slots), (V{0, 4, 2, 3}));  // the spare is training rank 1
}

TEST(HealPlan, LostSlotsAreFilledInOrderThenDropped) {
  // Slots 0 and 3 lost, one spare: the lower slot is filled, slot 3 is dropped (shrink).
  const HealPlan p = plan_heal({0, 1, 2, 3, kSpare}, {1, 2, 4});
  EXPECT_EQ(p.slots, (V{kGone, 1, 2, kGone, 0}));
  EXPECT_EQ(p.joined, V{4});
  EXPECT_EQ(p.filled_slots, V{0});
  EXPECT_EQ(p.dropped_slots, V{3});
  EXPECT_EQ(p.spares_left, 0);
  EXPECT_EQ(training_members(p.slots), (V{4, 1, 2}));
}

TEST(HealPlan, ALostSpareIsOnlyRemoved) {
  const HealPlan p = plan_heal({0, 1, kSpare, kSpare}, {0, 1, 3});
  EXPECT_EQ(p.slots, (V{0, 1, kGone, kSpare}));
  EXPECT_TRUE(p.joined.empty());
  EXPECT_TRUE(p.dropped_slots.empty());
  EXPECT_EQ(p.spares_left, 1);
}

TEST(HealPlan, SecondFailureUsesTheNextSpareAndKeepsSlots) {
  // After a first heal (spare 4 holds slot 1), slot 1's new holder dies: spare 5 takes it.
  const HealPlan p = plan_heal({0, kGone, 2, 3, 1, kSpare}, {0, 2, 3, 5});
  EXPECT_EQ(p.slots, (V{0, kGone, 2, 3, kGone, 1}));
  EXPECT_EQ(p.joined, V{5});
  EXPECT_EQ(training_members(p.slots), (V{0, 5, 2, 3}));
}

TEST(HealPlan, SparesOnlyLeftMeansTheStateIsLost) {
  const HealPlan p = plan_heal({0, 1, kSpare}, {2});
  EXPECT_TRUE(p.state_lost);
}

TEST(HealPlan, ASpareGivenASlotInAFailedAttemptHoldsNoState) {
  // Ranks 0 and 1 trained; rank 1 was lost and spare 2 given its slot in an attempt that failed;
  // then rank 0 is lost too: the state went with it, whatever the slots say.
  const HealPlan p = plan_heal({0, kGone, 1, kSpare}, {2, 3}, /*holders=*/{0, 1});
  EXPECT_TRUE(p.state_lost);
  const HealPlan q = plan_heal({0, kGone, 1, kSpare}, {0, 2, 3}, {0, 1});
  EXPECT_FALSE(q.state_lost);
}

TEST(HealPlan, AtTheEndOfTheProgramNoSpareIsPlaced) {
  const HealPlan p = plan_heal({0, 1, 2, kSpare}, {0, 2, 3}, {}, /*fill=*/false);
  EXPECT_EQ(p.slots, (V{0, kGone, 2, kSpare}));
  EXPECT_TRUE(p.joined.empty());
  EXPECT_EQ(p.dropped_slots, V{1});
  EXPECT_EQ(p.spares_left, 1);
}

TEST(HealPlan, NothingLostChangesNothing) {
  const HealPlan p = plan_heal({0, 1, 2, kSpare}, {0, 1, 2, 3});
  EXPECT_EQ(p.slots, (V{0, 1, 2, kSpare}));
  EXPECT_TRUE(p.joined.empty());
  EXPECT_FALSE(p.state_lost);
  EXPECT_EQ(p.spares_left, 1);
}

}  // namespace
}  // namespace ftcc::recovery
