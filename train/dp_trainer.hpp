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
// Checked, not assumed: the step's allreduce also carries the samples each rank fed to the model
// (a data::SampleTally: count and order-independent digest) and whether the reduced gradients are
// finite; the summary compares the total with what the batches before the final cursor hold
// (samples_digest_ok), and a non-finite loss or gradient stops every rank at the same step.
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

#include "ftcc/comm/communicator.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/recovery/recovery_event.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

// The training position that must be identical on every rank after each committed step (all
// three trainers): the data cursor, the steps committed, and what those steps fed to the model
// (samples_seen and samples_digest: a data::SampleTally, counted from the rows actually consumed,
// summed over the ranks). Restored with the model after a failure or on --resume.
struct TrainProgress {
  data::Cursor cursor;
  std::int64_t step = 0;          // global steps committed
  std::int64_t samples_seen = 0;
  std::uint64_t samples_digest = 0;
  data::SampleTally tally() const { return {samples_seen, samples_digest}; }
  void add(const data::SampleTally& t) {
    samples_seen += t.count;
    samples_digest += t.digest;
  }
};

struct TrainSummary {
  double final_loss = 0;      // MSE over the whole training set with the final parameters
  double last_step_loss = 0;  // mean loss of the last global batch
  std::string eval_name;      // "accuracy" (classification) or "mse" (regression), held-out set
  double eval_metric = 0;
  std::int64_t steps = 0;
  std::int64_t epochs = 0;    // epochs completed (data cursor)
  int world_size_initial = 0, world_size_final = 0;
  // Exactly-once, checked: samples_seen / samples_digest are what the committed steps fed to the
  // model (data::SampleTally); samples_expected / samples_digest_expected are what the batches
  // before the final data cursor hold, from the epochs' permutations (expected_tally).
  std::int64_t samples_seen = 0, samples_expected = 0;
  std::uint64_t samples_digest = 0, samples_digest_expected = 0;
  bool samples_digest_ok = false;  // samples_digest == samples_digest_expected
  std::vector<recovery::RecoveryEvent> recoveries;
  std::string param_sha256;
  double wall_s = 0;
  double samples_per_s = 0;         // whole run: samples_seen / wall_s (set-up and evaluation included)
  double step_samples_per_s = 0;    // steady state: ProgressReporter::steady_samples_per_s

  nlohmann::json to_json() const;
  // The summary every trainer ends with; wall_s and samples_per_s are measured from `start`.
  static TrainSummary of_run(double final_loss, double last_step_loss, bool classification, double eval_metric,
                             std::int64_t steps, std::int64_t epochs, int world_size_initial,
                             const recovery::ResilientGroup& group, const data::SampleTally& seen,
                             const data::SampleTally& expected, std::string param_sha256,
                             std::chrono::steady_clock::time_point start);
};

// Throws ftcc::Error ("non-finite loss (nan) at step 12: the training diverged (lower --lr, now
// 0.05) or the data holds NaN/Inf values", or "non-finite gradient (loss 3.5) at step 12: ...")
// when a step's loss or gradients are NaN or infinite. Pass values every rank holds after the
// step's allreduce (the reduced loss; whether any rank's gradients were not finite), so that every
// rank throws at the same step with the same message.
void require_finite(double reduced_loss, bool gradients_finite, std::int64_t step, const TrainConfig& cfg);

// pp/tp recovery (the survivors roll back to `step`) and tp's end of run: each rank passes its
// progress recorded at that step (nullptr if it has none). Returns the one of the lowest rank that
// has it, after checking that every rank that has one agrees on all of it, samples digest included
// (throws ftcc::Error otherwise, or when none has it; the same on every rank: an allgather).
TrainProgress agree_progress(comm::Communicator& c, const TrainProgress* mine, std::int64_t step);

// Runs the whole training on `group` (which may shrink). Every surviving rank returns the same
// summary. Throws ftcc::InvalidArgument for bad configurations (identical on every rank),
// ftcc::Error for runtime problems.
TrainSummary train_data_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group);

}  // namespace ftcc::train
