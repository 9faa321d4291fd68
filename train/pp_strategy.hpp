// train/pp_strategy.hpp: pipeline-parallel training (--parallel pp) as a strategy of the
// training driver (train/training_driver.hpp: loop, replicas, recovery, checkpoints).
//
// Model: the MLP of --layers, cut into contiguous stages balanced by parameter count
// (train/partition.hpp; layer = Linear + its activation), one stage per rank, rank order = stage
// order. Needs 1 <= ranks <= layers. A unit is one layer (UnitKey{layer, L}) with its optimizer
// state; after a failure each rank of the new partition takes its layers from their holders.
//
// Schedule (GPipe): the global batch is cut into --micro-batches M contiguous micro-batches. All M
// forwards run first (stage r receives activations [mb, width] from r-1 and sends its output to
// r+1), then all M backwards in reverse (the activations' gradients go back the same way). The last
// stage's loss is batch_loss(--loss, pred, target, B) (run_common.hpp), so the micro-batch gradients sum to the
// gradient of the whole batch; each stage then takes its own optimizer step.
#pragma once

#include <memory>

#include "ftcc/train/parallel_strategy.hpp"

namespace ftcc::train {

// The strategy of --parallel pp, for train_with_strategy (train/training_driver.hpp).
std::unique_ptr<ParallelStrategy> make_pipeline_strategy(const TrainConfig& cfg,
    const std::vector<std::int64_t>& widths, const TrainingData& data);

}  // namespace ftcc::train
