// train/dp_trainer.hpp: data-parallel training that keeps going when ranks die.
//
// Every rank holds a replica built from the seed (verified identical by SHA-256 at start). Each
// global batch (data/sampler.hpp: fixed micro-batches, split over the current ranks by a rule
// that depends only on the step and the world size) is computed in parts, the gradients are
// summed with our allreduce (train/gradient_reducer.hpp), then every rank takes the optimizer
// step: the step is *committed* on a rank once its allreduce completed.
//
// Consistency after a failure ("roll forward"): a rank can only finish a
// ring/tree allreduce with the complete sum, so after a failure in step k each survivor either
// committed k or did not. The recovery's agreement reports every survivor's last committed step;
// if they differ, the lowest rank that committed k broadcasts parameters, optimizer state and the
// data cursor to the others (resync), then every survivor checks the SHA-256 of its parameters
// against the others'. The step not committed anywhere is redone on the new group with the same
// global batch re-split over the survivors: applied exactly once, no sample skipped or repeated.
//
// Checked, not assumed: the step's allreduce also carries the samples each rank fed to the model
// (a data::SampleTally: count and order-independent digest) and whether the reduced gradients are
// finite; at the end the total is compared with what the batches before the final cursor hold
// (a mismatch stops every rank alike: require_samples_exact, exit 4), and a non-finite loss or
// gradient stops every rank at the same step.
//
// --deterministic: each fixed micro-batch's gradient is computed separately and summed in 64-bit
// fixed point (train/exact_sum.hpp), so the result, hence the final parameters, are bitwise the
// same for any rank count and any failures. Cost: one forward/backward per micro-batch instead of
// one per rank, a MAX allreduce per bucket and int64 (2x) traffic.
#pragma once

#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/run_common.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

// Runs the whole training on `group` (which may shrink). Every surviving rank returns the same
// summary. Throws ftcc::InvalidArgument for bad configurations (identical on every rank),
// ftcc::IoError when the checkpoint folder or --log-json cannot be written, ftcc::Error for other
// runtime problems.
TrainSummary train_data_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group);

}  // namespace ftcc::train
