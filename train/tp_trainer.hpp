// train/tp_trainer.hpp: tensor-parallel (Megatron-style) training that keeps going when ranks die.
//
// Model: the MLP of --layers; layers in pairs, a column-parallel Linear then a row-parallel one
// (train/tp_shard.hpp). Forward of a pair on rank r: a_r = act(x W_r^T + b_r) (its slice of the
// hidden features), z_r = a_r V_r^T (a partial output), z = allreduce-sum(z_r) + c, then the
// activation. Backward: the gradient of z is the same on every rank; each rank back-propagates it
// through its slice, and the input gradients (partial sums) are allreduced before the previous
// pair. An unpaired last layer is replicated. Every rank runs the whole global batch of the data
// cursor (the same batches as --parallel dp); --micro-batches does not apply.
// At start, every hidden width of a pair must be divisible by the rank count (Megatron's even
// split; clear error otherwise). After failures the survivors re-split as evenly as the widths
// allow (slices differ by at most one feature), so 4 -> 3 works on a width of 64.
//
// Resilience: every --replicate-every N steps each rank snapshots its shard (parameters and
// optimizer state) and sends a copy to the next --replicas K ranks. After a failure (revoke,
// shrink, agree) the survivors pick the newest step of which every shard of that step's split
// still has a copy, every survivor assembles the full model from those shards (broadcast from
// their holders), slices its new shard for the new rank count, and rolls back to that step (data
// cursor and samples follow; each batch is applied exactly once). Then the replicas are refreshed.
// A rank and all its buddies lost: fall back to the newest checkpoint, or stop with
// TrainingStateLost (train/pp_trainer.hpp). Checkpoints are in the data-parallel format.
// Memory: during a recovery, a checkpoint or the final metrics, a full-size copy of the model
// exists transiently (on every rank during a recovery, on rank 0 otherwise).
#pragma once

#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/dp_trainer.hpp"
#include "ftcc/train/pp_trainer.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

TrainSummary train_tensor_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group);

}  // namespace ftcc::train
