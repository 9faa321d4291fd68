#include "ftcc/recovery/quorum_rule.hpp"

#include <algorithm>
#include <sstream>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {
namespace {

std::string list(const std::vector<int>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

std::vector<int> sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

void require_distinct(const std::vector<int>& sorted_ranks, const char* what) {
  const auto dup = std::adjacent_find(sorted_ranks.begin(), sorted_ranks.end());
  FTCC_INVARIANT(dup == sorted_ranks.end()) << "decide_quorum: rank " << *dup << " appears twice in " << what;
}

}  // namespace

std::string quorum_lost_reason(const std::vector<int>& survivors, const std::vector<int>& lost,
                               const std::vector<int>& unconfirmed, int group_size) {
  std::ostringstream s;
  s << "quorum lost: " << survivors.size() << " of " << group_size << " ranks (" << list(survivors)
    << ") remain after losing ranks " << list(lost) << ", and the loss of " << list(unconfirmed)
    << " could not be confirmed (another host, or still running): this side of a possible network "
       "partition stops so that only a majority goes on";
  return s.str();
}

QuorumDecision decide_quorum(const QuorumInput& in) {
  const auto survivors = sorted(in.survivors), lost = sorted(in.lost), confirmed = sorted(in.confirmed);
  require_distinct(survivors, "survivors");
  require_distinct(lost, "lost");
  require_distinct(confirmed, "confirmed");
  for (int r : lost)
    FTCC_INVARIANT(!std::binary_search(survivors.begin(), survivors.end(), r))
        << "decide_quorum: rank " << r << " is both a survivor and lost";
  for (int r : confirmed)
    FTCC_INVARIANT(std::binary_search(lost.begin(), lost.end(), r))
        << "decide_quorum: rank " << r << " is confirmed dead but not lost";

  QuorumDecision d;
  for (int r : in.lost)
    if (!std::binary_search(confirmed.begin(), confirmed.end(), r)) d.unconfirmed.push_back(r);
  const auto n_survivors = static_cast<int>(in.survivors.size());
  d.old_size = n_survivors + static_cast<int>(in.lost.size());
  d.eligible = d.old_size - static_cast<int>(confirmed.size());
  // Confirmed-dead ranks are on no side of a partition, so two sides can never both pass.
  d.go_on = 2 * n_survivors > d.eligible;
  if (d.go_on) {
    std::ostringstream s;
    s << "quorum kept: " << n_survivors << " of " << d.old_size << " ranks remain, a strict majority of the "
      << d.eligible << " not confirmed dead";
    d.reason = s.str();
  } else {
    d.reason = quorum_lost_reason(in.survivors, in.lost, d.unconfirmed, d.old_size);
  }
  return d;
}

}  // namespace ftcc::recovery
