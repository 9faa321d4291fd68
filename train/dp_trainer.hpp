// train/dp_trainer.hpp: data-parallel training that keeps going when ranks die.
//
// Every rank holds a replica built from the seed (verified identical by SHA-256 at start). Each
// global batch (data/sampler.hpp: fixed micro-batches, split over the current ranks by a rule
// that depends only on the step and the world size) is computed in parts, the gradients are
// summed with our allreduce (train/gradient_reducer.hpp), then every rank takes the optimizer
// step: the step is *committed* on a rank once its allreduce completed.
//
// Consistency after a failure (DESIGN.md option 2, "roll forward"): a rank can only finish a
// ring/tree allreduce with the complete sum, so after a failure in step k each survivor either
// committed k or did not. The recovery's agreement reports every survivor's last committed step;
// if they differ, the lowest rank that committed k broadcasts parameters, optimizer state and the
// data cursor to the others (resync), then every survivor checks the SHA-256 of its parameters
// against the others'. The step not committed anywhere is redone on the new group with the same
// global batch re-split over the survivors: applied exactly once, no sample skipped or repeated.
//
// --deterministic: each fixed micro-batch's gradient is computed separately and summed in 64-bit
// fixed point (train/exact_sum.hpp), so the result, hence the final parameters, are bitwise the
// same for any rank count and any failures. Cost: one forward/backward per micro-batch instead of
// one per rank, a MAX allreduce per bucket and int64 (2x) traffic.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "recovery/recovery_event.hpp"
#include "recovery/resilient_group.hpp"
#include "train/train_config.hpp"

namespace ftcc::train {

struct TrainSummary {
  double final_loss = 0;      // MSE over the whole training set with the final parameters
  double last_step_loss = 0;  // mean loss of the last global batch
  std::string eval_name;      // "accuracy" (classification) or "mse" (regression), held-out set
  double eval_metric = 0;
  std::int64_t steps = 0;
  std::int64_t epochs = 0;    // epochs completed (data cursor)
  int world_size_initial = 0, world_size_final = 0;
  std::int64_t samples_seen = 0;
  std::vector<recovery::RecoveryEvent> recoveries;
  std::string param_sha256;
  double wall_s = 0;
  double samples_per_s = 0;

  nlohmann::json to_json() const;
  // The summary every trainer ends with; wall_s and samples_per_s are measured from `start`.
  static TrainSummary of_run(double final_loss, double last_step_loss, bool classification, double eval_metric,
                             std::int64_t steps, std::int64_t epochs, int world_size_initial,
                             const recovery::ResilientGroup& group, std::int64_t samples_seen,
                             std::string param_sha256, std::chrono::steady_clock::time_point start);
};

// Runs the whole training on `group` (which may shrink). Every surviving rank returns the same
// summary. Throws ftcc::InvalidArgument for bad configurations (identical on every rank),
// ftcc::Error for runtime problems.
TrainSummary train_data_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group);

}  // namespace ftcc::train
