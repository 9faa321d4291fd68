// train/replica_verifier.hpp: silent data corruption caught by comparing live replicas.
//
// Every dp replica applies the same summed gradient, so the replicas of a unit (every dp rank; in
// dp,pp and dp,tp the ranks that hold the same stage or shard in each model replica) hold the same
// bytes by construction. Every --verify-every steps the training driver (train/training_driver.cpp)
// digests each rank's parameters and optimizer state, allgathers the digests over the training
// group, and vote() names the ranks whose digest differs from a strict majority of the ranks at
// their position, and counts the positions where no digest has a strict majority (two replicas
// that differ, or an even split). When every position agrees, the packed units become the *last
// verified state* (VerifiedState), the one a rollback restores.
//  - state_digest: 64 bits. A change of any one 8-byte word (a flipped bit, a stuck element)
//    always changes it: the digest is a sum of a bijection of each word and its index. Changes of
//    several words collide with chance about 2^-64. It guards against hardware, not forgers.
//  - vote: pure; every rank calls it on the same allgathered data and gets the same verdict.
// verify_replicas() is the same check for an embedding program's own state (docs/reliability.md
// has an example that acts on the verdict under a real exclusion).
// What it cannot see: a wrong computation whose result every replica applies (a corrupted
// gradient before the replicas' sum), and anything in a unit with no live replica (pp or tp with
// one model replica). docs/reliability.md says so.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/train/replica_store.hpp"
#include "ftcc/train/training_progress.hpp"

namespace ftcc::train {

std::uint64_t state_digest(std::span<const std::byte> bytes);

struct ReplicaVerdict {
  std::vector<int> odd;  // ranks (of the group voted over) outvoted by a strict majority of their position
  int undecided = 0;     // positions whose digests differ with no strict majority
  bool clean() const { return odd.empty() && undecided == 0; }
};

// digest[r] and position[r] for each rank r of a group; position -1: r holds nothing (idle).
// Positions held by one rank have nothing to compare with and never count.
ReplicaVerdict vote(std::span<const std::uint64_t> digest, std::span<const int> position);

// For an embedding program whose ranks of c each hold a replica of the same state: the digest of
// this rank's `state`, allgathered over c (our allgather), and the vote; ranks in the verdict are
// ranks of c. Every rank of c calls it alike and gets the same verdict. A failure during the
// allgather throws comm::FaultDetected as any collective does.
ReplicaVerdict verify_replicas(comm::Communicator& c, std::span<const std::byte> state);

// The last verified state of this rank's part: its units' bytes at `progress`'s step, for the
// split (n, r) it was packed from.
struct VerifiedState {
  TrainProgress progress;
  std::pair<int, int> split{0, 0};
  std::map<UnitKey, std::shared_ptr<Bytes>> units;  // shared with the replica store after a rollback
  bool held() const { return !units.empty(); }
  std::int64_t step() const { return held() ? progress.step : -1; }
};

}  // namespace ftcc::train
