#include "ftcc/recovery/heal_plan.hpp"

#include <algorithm>
#include <utility>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {

HealPlan plan_heal(const std::vector<int>& slots, const std::vector<int>& alive, const std::vector<int>& holders,
                   bool fill) {
  HealPlan p;
  p.slots = slots;
  std::vector<bool> is_alive(slots.size(), false);
  for (int r : alive) {
    FTCC_INVARIANT(r >= 0 && static_cast<size_t>(r) < slots.size()) << "plan_heal: survivor " << r << " out of range";
    is_alive[static_cast<size_t>(r)] = true;
  }
  std::vector<int> lost, spares;
  bool holder_survives = false, had_holder = false;
  for (size_t r = 0; r < slots.size(); ++r) {
    const int s = slots[r];
    if (s >= 0) had_holder = true;
    if (!is_alive[r]) {
      if (s >= 0) lost.push_back(s);
      p.slots[r] = kGone;
    } else if (s == kSpare) {
      spares.push_back(static_cast<int>(r));  // increasing original rank
    } else if (s >= 0) {
      holder_survives = true;
    }
  }
  if (!holders.empty()) {
    had_holder = true;
    holder_survives = std::any_of(holders.begin(), holders.end(), [&](int r) {
      return r >= 0 && static_cast<size_t>(r) < is_alive.size() && is_alive[static_cast<size_t>(r)];
    });
  }
  p.state_lost = had_holder && !holder_survives;
  std::sort(lost.begin(), lost.end());
  size_t i = 0;
  for (; fill && i < lost.size() && i < spares.size(); ++i) {
    p.slots[static_cast<size_t>(spares[i])] = lost[i];
    p.joined.push_back(spares[i]);
    p.filled_slots.push_back(lost[i]);
  }
  p.dropped_slots.assign(lost.begin() + static_cast<std::ptrdiff_t>(i), lost.end());
  p.spares_left = static_cast<int>(spares.size() - i);
  return p;
}

std::vector<int> training_members(const std::vector<int>& slots) {
  std::vector<std::pair<int, int>> by_slot;
  for (size_t r = 0; r < slots.size(); ++r)
    if (slots[r] >= 0) by_slot.emplace_back(slots[r], static_cast<int>(r));
  std::sort(by_slot.begin(), by_slot.end());
  std::vector<int> out;
  for (const auto& [slot, r] : by_slot) out.push_back(r);
  return out;
}

}  // namespace ftcc::recovery
