// train/dp_strategy.hpp: data-parallel training (--parallel dp) as a strategy of the training
// driver (train/training_driver.hpp: loop, commit, recovery, checkpoints, summary).
//
// Every rank holds the whole model (nn::mlp(widths, seed): the same on every rank, checked by
// SHA-256 at the start) and its optimizer: one unit, UnitKey{0, 1}, so the driver's grid is one
// replica per rank and the gradient sum over the replicas is data parallelism's allreduce
// (train/gradient_reducer.hpp; overlapped with backward on the CPU, exact under --deterministic).
// After a failure every survivor's live model is a copy at its committed step, so the driver's
// restore takes the newest (a roll forward: nothing committed is lost) from the lowest rank that
// holds it. Runs on --device cpu or cuda (the data, the model, the reducer's arena on the device).
#pragma once

#include <memory>

#include "ftcc/train/parallel_strategy.hpp"

namespace ftcc::train {

// The strategy of --parallel dp, for train_with_strategy (train/training_driver.hpp).
std::unique_ptr<ParallelStrategy> make_data_parallel_strategy(const TrainConfig& cfg,
    const std::vector<std::int64_t>& widths, const TrainingData& data);

}  // namespace ftcc::train
