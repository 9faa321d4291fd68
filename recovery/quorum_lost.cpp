#include "ftcc/recovery/quorum_lost.hpp"

#include "ftcc/recovery/quorum_rule.hpp"

namespace ftcc::recovery {

QuorumLost::QuorumLost(std::vector<int> survivors, std::vector<int> lost, std::vector<int> unconfirmed, int group_size)
    : ftcc::Error(quorum_lost_reason(survivors, lost, unconfirmed, group_size)),
      survivors_(std::move(survivors)),
      lost_(std::move(lost)),
      unconfirmed_(std::move(unconfirmed)) {}

}  // namespace ftcc::recovery
