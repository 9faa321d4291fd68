#include "ftcc/recovery/quorum_lost.hpp"

#include <sstream>

namespace ftcc::recovery {
namespace {

std::string list(const std::vector<int>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

std::string message(const std::vector<int>& survivors, const std::vector<int>& lost,
                    const std::vector<int>& unconfirmed, int group_size) {
  std::ostringstream s;
  s << "quorum lost: " << survivors.size() << " of " << group_size << " ranks (" << list(survivors)
    << ") remain after losing ranks " << list(lost) << ", and the loss of " << list(unconfirmed)
    << " could not be confirmed (another host, or still running): this side of a possible network "
       "partition stops so that only a majority goes on";
  return s.str();
}

}  // namespace

QuorumLost::QuorumLost(std::vector<int> survivors, std::vector<int> lost, std::vector<int> unconfirmed, int group_size)
    : ftcc::Error(message(survivors, lost, unconfirmed, group_size)),
      survivors_(std::move(survivors)),
      lost_(std::move(lost)),
      unconfirmed_(std::move(unconfirmed)) {}

}  // namespace ftcc::recovery
