// recovery/quorum_rule.hpp: whether the survivors of a recovery may go on (the quorum rule).
//
// Pure: no MPI, no /proc. The caller (recovery/membership_protocol.cpp, step 3 of the protocol)
// collects the agreed inputs; every survivor passes the same ones and so decides alike.
// The rule (why: recovery/quorum_lost.hpp, docs/recovery.md "Several hosts"): go on only if
//   2 x survivors > old size - confirmed deaths
// i.e. a strict majority of the old group once the ranks known dead are counted out. Exactly
// half stops; when every loss is confirmed (one host) any survivor goes on.
#pragma once

#include <string>
#include <vector>

namespace ftcc::recovery {

struct QuorumInput {
  std::vector<int> survivors;  // ranks of the new group
  std::vector<int> lost;       // ranks of the old group missing from the new one
  std::vector<int> confirmed;  // the lost ranks whose death some survivor confirmed on its own host
};

struct QuorumDecision {
  bool go_on = true;
  int old_size = 0;               // survivors + lost
  int eligible = 0;               // old_size - confirmed deaths: the base of the majority
  std::vector<int> unconfirmed;   // lost ranks not confirmed dead, in the order of `lost`
  std::string reason;             // one line; when !go_on, the text QuorumLost carries
};

// Pre: the lists hold distinct ranks, survivors and lost are disjoint, confirmed is a subset of
// lost (else ftcc::InvalidArgument naming the rank).
QuorumDecision decide_quorum(const QuorumInput& in);

// The text of a lost quorum (QuorumLost::what()).
std::string quorum_lost_reason(const std::vector<int>& survivors, const std::vector<int>& lost,
                               const std::vector<int>& unconfirmed, int group_size);

}  // namespace ftcc::recovery
