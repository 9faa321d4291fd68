#include "ftcc/train/verdict_exchange.hpp"

#include <algorithm>

#include "ftcc/base/error.hpp"

namespace ftcc::train {

namespace {
// [number, step, verified step, undecided, rollback, last undecided step, then per rank its Fate, then per rank 1 + the
// step at which its state at rest was found changed, or 0]. Absent fields are the smallest value
// they take, so the max over ranks is what any rank knows.
constexpr std::size_t kHead = 6;
}  // namespace

std::vector<std::int64_t> encode_verdict(const PendingVerdict* pending, std::span<const int> members, int me,
                                         const RankFacts& facts) {
  const std::size_t n = members.size();
  std::vector<std::int64_t> w(kHead + 2 * n, 0);
  w[0] = w[1] = -1;
  w[2] = std::max<std::int64_t>(facts.verified_step, -1);
  w[5] = std::max<std::int64_t>(facts.last_undecided_at, -1);
  if (pending != nullptr) {
    w[0] = pending->number;
    w[1] = pending->step;
    w[3] = pending->undecided;
    w[4] = pending->rollback ? 1 : 0;
    for (std::size_t r = 0; r < n; ++r) {
      const int orig = members[r];
      const bool odd = std::find(pending->odd.begin(), pending->odd.end(), orig) != pending->odd.end();
      w[kHead + r] = static_cast<std::int64_t>(odd ? Fate::outvoted : pending->straggler == orig ? Fate::evicted : Fate::stays);
    }
  }
  if (facts.changed_at_rest >= 0) w.at(kHead + n + static_cast<std::size_t>(me)) = facts.changed_at_rest + 1;
  return w;
}

SettledVerdict decode_verdict(std::span<const std::int64_t> words, std::span<const int> members) {
  const std::size_t n = members.size();
  FTCC_INVARIANT(words.size() == kHead + 2 * n) << "verdict exchange: " << words.size() << " words for " << n << " ranks";
  SettledVerdict v;
  v.number = words[0];
  v.step = words[1];
  v.rollback_to = words[2];
  v.undecided = words[3];
  v.rollback = words[4] != 0;
  v.last_undecided_at = words[5];
  for (std::size_t r = 0; r < n; ++r) {
    const auto f = static_cast<Fate>(std::clamp<std::int64_t>(words[kHead + r], 0, 2));
    v.fate.push_back(f);
    if (f == Fate::outvoted) v.outvoted.push_back(members[r]);
    if (f == Fate::evicted) v.evicts = true;
    if (f == Fate::stays && v.writer < 0) v.writer = static_cast<int>(r);
    if (const std::int64_t at = words[kHead + n + r]; at > 0) {
      v.changed_at_rest.push_back(members[r]);
      v.changed_at_step = std::max(v.changed_at_step, at - 1);
    }
  }
  return v;
}

}  // namespace ftcc::train
