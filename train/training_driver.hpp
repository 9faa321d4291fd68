// train/training_driver.hpp: the one training loop, for every parallel mode; a strategy
// (train/parallel_strategy.hpp: dp_strategy, pp_strategy, tp_strategy) fills in how the model is
// cut and trained. docs/training.md (dp) and docs/model-parallel.md (pp, tp, hybrids) say what
// each mode guarantees; the driver, for every strategy:
//  - start: validates the configuration (the same flags on every rank: a hash compared over the
//    job and its hot spares), lays the ranks out as replicas x ranks per replica
//    (train/parallel_grid.hpp; dp: every rank a replica of the whole model), builds this rank's
//    part, and starts from --resume (rank 0 reads the newest valid checkpoint, each rank gets its
//    units) or --init-weights (rank 0 reads the parameters, fresh optimizer state); the replicas
//    of each part are then compared by SHA-256;
//  - each step: the global batch of the data cursor (data/sampler.hpp) is dealt out to the
//    replicas; strategy.step() computes each replica's gradients, the driver sums them over the
//    replicas (train/gradient_reducer.hpp: buckets, overlapped with dp's backward; the exact sum
//    under --deterministic); one allreduce of the loss, the non-finite verdicts and the rows fed is
//    the step's commit point (every rank then decides alike); the optimizer step, then every
//    --replicate-every steps a snapshot of this rank's units goes to the next --replicas ranks of
//    its replica (ring; none when a replica is one rank: the other replicas are its copies), and
//    every --checkpoint-every steps the units are gathered into the full model on rank 0, which
//    writes a checkpoint (one format for every mode);
//  - on a failure (comm::FaultDetected; ResilientGroup revokes, shrinks, agrees): the survivors
//    list the (step, unit) copies they hold (snapshots, buddy copies, and their live units at their
//    committed step), take the newest step at which every unit of a split has a copy
//    (train/replica_store.hpp), move each unit from its holder to the ranks that need it in the
//    new grid (hot spares and respawned processes included), rebuild, and continue from that
//    step's position (data cursor, samples seen and digest, checked equal on every survivor): dp
//    rolls forward to the most advanced survivor, pp and tp to the newest complete copy; steps
//    after it are redone with the same batches, so each batch is applied exactly once. With no
//    complete copy, the newest checkpoint of --checkpoint-dir is loaded instead (said on stderr);
//    with none, every survivor throws TrainingStateLost naming the lost units (exit 4);
//  - the end: every survivor agrees it is done (ResilientGroup::all_finished), the final loss, the
//    held-out metric and the SHA-256 of the parameters are computed (dp: every rank on its share
//    of the data; otherwise on rank 0 from the gathered units, broadcast): every surviving rank
//    returns the same summary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/parallel_strategy.hpp"
#include "ftcc/train/run_common.hpp"
#include "ftcc/train/train_config.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {

// Makes the strategy once the data and the model's widths are known.
using StrategyFactory = std::function<std::unique_ptr<ParallelStrategy>(
    const TrainConfig& cfg, const std::vector<std::int64_t>& widths, const TrainingData& data)>;

// Runs the whole training on `group` (which may shrink), with the strategy of cfg.parallel.
// Throws ftcc::InvalidArgument for bad configurations (identical on every rank), TrainingStateLost,
// ftcc::IoError when the checkpoint folder or --log-json cannot be written, ftcc::Error for other
// runtime problems.
TrainSummary run_training(const TrainConfig& cfg, recovery::ResilientGroup& group);

// The same with a strategy of one's own.
TrainSummary train_with_strategy(const TrainConfig& cfg, recovery::ResilientGroup& group, const StrategyFactory& make);

}  // namespace ftcc::train
