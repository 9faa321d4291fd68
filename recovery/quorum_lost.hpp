// recovery/quorum_lost.hpp: the error a rank gets when it is on the losing side of a recovery.
//
// A survivor cannot tell a rank that crashed on another host from one that is alive behind a
// network partition: both go silent and both are declared failed. If both sides of a partition
// recovered, two groups would train on (and checkpoint) the same job. So a recovery goes on only
// when its survivors are a strict majority of the old group minus the ranks whose death a
// survivor confirmed (ranks are confirmed dead only by a survivor on their own host, from /proc:
// no such pid, a recycled pid, a zombie). Confirmed-dead ranks are on no side of a partition,
// so two sides can never both pass; when every loss is confirmed (always, on one host), any
// survivor passes. Otherwise every survivor of that side throws QuorumLost (the confirmations
// are exchanged during the agreement, so they decide alike). ftcc-train prints it and leaves
// without MPI_Finalize (the exit guard makes that a SIGKILL, which the runtime counts as one
// more failed process rather than a reason to abort the job). The rule itself, as a pure
// function: recovery/quorum_rule.hpp.
#pragma once

#include <string>
#include <vector>

#include "ftcc/base/error.hpp"

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
