// train/state_at_rest.hpp: silent data corruption of state at rest, caught without a replica.
//
// Between the optimizer step that writes a rank's parameters and optimizer state and the next
// step that reads them, nothing may change them. StateAtRest seals the state with a digest (the
// 64-bit state_digest of train/replica_verifier.hpp over every tensor's bytes, in order) when the
// optimizer or a restore has written it, and check() compares before the state is next used,
// copied to a buddy or checkpointed. The training driver (train/training_driver.cpp) does both on
// every step (ftcc-train --verify-at-rest: by default where no live replica can vote, i.e. pp or tp
// with one model replica; `on` everywhere, as a first line before the vote): a mismatch drops this
// rank's live state,
// and the recovery that follows gives it the newest copy the restore plan finds (a live replica,
// or a buddy copy: every rank then rolls back to it); a rank caught twice leaves the job.
//  - It sees memory that changes at rest (a flipped bit, a stray write). It cannot see a wrong
//    computation (a corrupted gradient or optimizer arithmetic): the optimizer seals what it
//    wrote. Only live replicas can see that (replica verification, --verify-every).
//  - The state on a GPU is copied to the host to be digested.
//  - Cost: two passes over the state per step (about 23 GB/s each on the 2-core VM, at the memory
//    bound: bench/engine/state_digest_bench.cpp); measured in docs/reliability.md.
#pragma once

#include <cstdint>
#include <optional>

#include "ftcc/nn/module.hpp"

namespace ftcc::train {

// The digest of the tensors' bytes, in order (names are not part of it): a change of any one
// 8-byte word of any tensor always changes it.
std::uint64_t tensors_digest(const nn::NamedTensors& params, const nn::NamedTensors& optimizer_state);

class StateAtRest {
 public:
  // The state as just written (by the optimizer, a restore, a rollback): the next check compares with it.
  void seal(const nn::NamedTensors& params, const nn::NamedTensors& optimizer_state);
  // The state is about to be rewritten by something other than the optimizer (a recovery): no check
  // until the next seal.
  void unseal() { sealed_.reset(); }
  bool sealed() const { return sealed_.has_value(); }
  // True when unsealed or unchanged since the seal. A change is counted and unseals (the state must
  // be restored before it is sealed again).
  bool check(const nn::NamedTensors& params, const nn::NamedTensors& optimizer_state);
  // Changes found since construction.
  int caught() const { return caught_; }

 private:
  std::optional<std::uint64_t> sealed_;
  int caught_ = 0;
};

}  // namespace ftcc::train
