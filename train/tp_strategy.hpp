// train/tp_strategy.hpp: tensor-parallel training (--parallel tp) as a strategy of the
// training driver (train/training_driver.hpp: loop, replicas, recovery, checkpoints).
//
// Model: the MLP of --layers, its Linear layers in Megatron pairs (train/tp_shard.hpp): the first
// of a pair column-parallel, the second row-parallel, an odd last layer replicated. Every rank
// feeds the whole global batch to its slices; one allreduce per pair sums the row-parallel partial
// outputs in the forward pass, one per pair boundary sums the input gradients in the backward pass.
// A unit is a rank's shard (UnitKey{rank, ranks of the split}); after a failure every survivor
// assembles the model from the shards of the newest complete split and slices its new shard.
// Needs a hidden width of every pair divisible by the rank count.
#pragma once

#include <memory>

#include "ftcc/train/parallel_strategy.hpp"

namespace ftcc::train {

// The strategy of --parallel tp, for train_with_strategy (train/training_driver.hpp).
std::unique_ptr<ParallelStrategy> make_tensor_strategy(const TrainConfig& cfg,
    const std::vector<std::int64_t>& widths, const TrainingData& data);

}  // namespace ftcc::train
