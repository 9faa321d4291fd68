// recovery/quorum_lost.hpp: the error a rank gets when it is on the losing side of a recovery.
//
// A survivor cannot tell a rank that crashed on another host from one that is alive behind a
// network partition: both go silent and both are declared failed. If both sides of a partition
// recovered, two groups would train on (and checkpoint) the same job. So a recovery that loses
// at least half of the group it started from, with at least one lost rank whose death no
// survivor could confirm (ranks are confirmed dead only by a survivor on their own host, from
// /proc), stops with QuorumLost on every survivor of that side instead of continuing. The side
// with a strict majority continues. Every survivor of a side decides alike (the confirmations
// are exchanged during the agreement). ftcc-train prints it and leaves without MPI_Finalize.
#pragma once

#include <string>
#include <vector>

#include "base/error.hpp"

namespace ftcc::recovery {

class QuorumLost : public ftcc::Error {
 public:
  QuorumLost(std::vector<int> survivors, std::vector<int> lost, std::vector<int> unconfirmed, int group_size);
  const std::vector<int>& survivors() const { return survivors_; }
  const std::vector<int>& lost() const { return lost_; }
  // Lost ranks whose death no survivor could confirm (on another host, or still running).
  const std::vector<int>& unconfirmed() const { return unconfirmed_; }

 private:
  std::vector<int> survivors_, lost_, unconfirmed_;
};

}  // namespace ftcc::recovery
