// recovery/heal_plan.hpp: which hot spare takes which lost place, decided from agreed facts alone.
//
// The job's processes are numbered by original rank. Each holds a slot: >= 0, the place in the
// training group it fills (the training group's ranks are the slots in increasing order; at
// start slot s is original rank s), kSpare for a hot spare that trains nothing yet, kGone for a
// process lost earlier. plan_heal(slots, alive) is what every survivor computes after a shrink,
// from the same inputs (the slots before, the same on every process, and the agreed survivors),
// so every survivor gets the same plan without communicating:
//  - a process not in `alive` is gone; a slot it held is lost;
//  - lost slots are filled in increasing order by the alive spares in increasing original rank;
//  - lost slots left over (no spare left) are dropped: the training group shrinks;
//  - state_lost: no process that held the training state survives (spares hold none; `holders`
//    are the processes that held it when the recovery began: a spare given a slot in an attempt
//    that then failed holds nothing yet). Empty `holders`: the slot holders of `slots`;
//  - fill = false: no spare takes a place (the program is past its loop and has no hooks left to
//    hand a newcomer the state): every lost slot is dropped.
// Pure: no MPI, no clock; unit-tested in tests/recovery/heal_plan_test.cpp.
#pragma once

#include <vector>

namespace ftcc::recovery {

inline constexpr int kSpare = -1;
inline constexpr int kGone = -2;

struct HealPlan {
  std::vector<int> slots;          // the new slot of every original rank
  std::vector<int> joined;         // original ranks of the spares that took a slot, by slot
  std::vector<int> filled_slots;   // the slots they took, in the same order
  std::vector<int> dropped_slots;  // lost slots no spare was left for
  int spares_left = 0;             // alive spares after the plan
  bool state_lost = false;         // every slot holder was lost
};

HealPlan plan_heal(const std::vector<int>& slots, const std::vector<int>& alive, const std::vector<int>& holders = {},
                   bool fill = true);

// Original ranks of the training group, in training-rank order (slot order).
std::vector<int> training_members(const std::vector<int>& slots);

}  // namespace ftcc::recovery
