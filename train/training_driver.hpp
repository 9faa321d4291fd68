// train/mp_driver.hpp: the one loop of model-parallel training; a strategy (train/mp_strategy.hpp:
// pp_strategy, tp_strategy) fills in how the model is cut and trained.
//
// The driver, for every strategy:
//  - start: validates the configuration (cpu only, --deterministic for pipelines only,
//    --on-failure keep-global-batch; the same flags on every rank), builds this rank's part, and starts from
//    --resume (rank 0 reads the newest valid checkpoint, each rank gets its units) or
//    --init-weights (rank 0 reads the parameters, fresh optimizer state);
//  - each step: the global batch of the data cursor (data/sampler.hpp, the same batches as
//    --parallel dp) goes to strategy.step(); one allreduce of the loss, the non-finite verdicts
//    and the rows fed is the step's commit point (every rank then decides alike); the optimizer
//    step, then every --replicate-every steps a snapshot of this rank's units goes to the next
//    --replicas ranks (ring), and every --checkpoint-every steps the units are gathered into the
//    full model on rank 0, which writes a checkpoint in the data-parallel format;
//  - on a failure (comm::FaultDetected; ResilientGroup revokes, shrinks, agrees): the survivors
//    list the (step, unit) copies they hold, take the newest step at which every unit of a split
//    has a copy (train/replica_store.hpp), move each unit from its holder to the ranks that need it
//    in the new split, rebuild, and roll back to that step (data cursor, samples seen and digest
//    recorded at that step, checked equal on every survivor); the steps after it are redone with
//    the same batches, so each batch is applied exactly once. With no complete copy, the newest
//    checkpoint of --checkpoint-dir is loaded instead (said on stderr); with none, every survivor
//    throws TrainingStateLost naming the lost units (a job-level error, exit 4);
//  - the end: every survivor agrees it is done (ResilientGroup::all_finished), the units are
//    gathered on rank 0, which computes the final loss, the held-out metric and the SHA-256 of the
//    parameters, broadcast to all: every surviving rank returns the same summary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/mp_strategy.hpp"
#include "ftcc/train/run_common.hpp"
#include "ftcc/train/train_config.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {

// Makes the strategy once the data and the model's widths are known.
using StrategyFactory = std::function<std::unique_ptr<ModelParallelStrategy>(
    const TrainConfig& cfg, const std::vector<std::int64_t>& widths, const TrainingData& data)>;

// Runs the whole training on `group` (which may shrink). Throws ftcc::InvalidArgument for bad
// configurations (identical on every rank), TrainingStateLost, ftcc::Error for runtime problems.
TrainSummary train_model_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group, const StrategyFactory& make);

// train_model_parallel with the strategy of --parallel pp (train/pp_strategy.hpp) and tp
// (train/tp_strategy.hpp).
TrainSummary train_pipeline_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group);
TrainSummary train_tensor_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group);

}  // namespace ftcc::train
