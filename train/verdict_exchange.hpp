// train/verdict_exchange.hpp: how the survivors of a recovery agree on the newest verdict of the
// checks for faults that do not crash (train/replica_verifier.hpp, train/straggler_watch.hpp,
// train/state_at_rest.hpp), whoever found it.
//
// A replica verdict or a straggler eviction is found at a check by every rank whose allgather
// completed, and is the same wherever it is known (a pure function of the allgathered data); a
// rank may have missed it (its allgather failed) or applied it in an earlier try of the recovery.
// A change of state at rest is found by its rank alone. At the start of every recovery the
// survivors allreduce (max) the words encode_verdict() gives, and decode_verdict() then gives every
// one of them the same SettledVerdict: the newest verdict any of them has not applied, each rank's
// fate in it, the step to roll back to, and the ranks that found their own state changed at rest.
// The rollback step is the newest verified step any survivor holds, given by every rank whether it
// knows the verdict or not: a newcomer (a spare or a respawned process) holds none, and may be the
// only rank that learned the verdict (the others' allgather was cut short by its revoke). So is
// the step of the last verdict without a majority, so that a newcomer also stops when it repeats. Verdicts are numbered, so
// that every rank applies each one once across the tries (the training driver does: settle_verdict).
// Both functions are pure.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ftcc::train {

// The newest verdict this rank knows (number -1: none).
struct PendingVerdict {
  std::int64_t number = -1;       // the driver's count of verdicts: the same on every rank that finds it
  std::int64_t step = -1;         // the check's step
  std::int64_t undecided = 0;     // unit groups without a strict majority
  bool rollback = false;          // a mismatch: every rank that stays rolls back
  std::vector<int> odd;           // original ranks outvoted by their replicas
  int straggler = -1;             // the original rank evicted as a straggler (-1: none)
};

enum class Fate : std::int64_t { stays = 0, outvoted = 1, evicted = 2 };

struct SettledVerdict {
  std::int64_t number = -1, step = -1, undecided = 0;
  std::int64_t rollback_to = -1;       // the newest verified step a rank of the group holds (-1: none)
  std::int64_t last_undecided_at = -1; // the newest step of a verdict without a majority applied before
  bool rollback = false;
  std::vector<Fate> fate;              // per rank of the group (all `stays` when number is -1)
  std::vector<int> outvoted;           // the original ranks whose fate is `outvoted`
  bool evicts = false;                 // some rank's fate is `evicted`
  int writer = -1;                     // the lowest rank of the group that stays (it reports the verdict)
  std::vector<int> changed_at_rest;    // original ranks that found their state changed at rest
  std::int64_t changed_at_step = -1;   // the latest step at which one of them found it
};

// What a rank knows of its own besides a pending verdict (-1 where it has none).
struct RankFacts {
  std::int64_t verified_step = -1;      // the step of the last verified state it holds (a newcomer: none)
  std::int64_t last_undecided_at = -1;  // the step of the last verdict without a majority it applied
  std::int64_t changed_at_rest = -1;    // the step at which it found its own state changed at rest
};

// This rank's words: `pending` (null, or a verdict this rank has not applied yet) with the fates of
// `members` (the group's original ranks, in group order), and the facts of this rank (group rank `me`).
std::vector<std::int64_t> encode_verdict(const PendingVerdict* pending, std::span<const int> members, int me,
                                         const RankFacts& facts);
// The allreduced (max) words of every rank of the group.
SettledVerdict decode_verdict(std::span<const std::int64_t> words, std::span<const int> members);

}  // namespace ftcc::train
