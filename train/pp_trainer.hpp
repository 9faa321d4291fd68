// train/pp_trainer.hpp: pipeline-parallel training that keeps going when ranks die.
//
// Model: the MLP of --layers, cut into contiguous stages balanced by parameter count
// (train/partition.hpp; layer = Linear + its activation), one stage per rank, rank order = stage
// order. Needs 1 <= ranks <= layers.
//
// Schedule (GPipe): the global batch of the data cursor (data/sampler.hpp, the same batches as
// --parallel dp) is cut into --micro-batches M contiguous micro-batches. All M forwards run first
// (stage r receives activations [mb, width] from r-1 and sends its output to r+1 with
// comm::Communicator send/recv), then all M backwards in reverse (gradients of the activations
// go back the same way). The last stage's loss is mse_loss(pred, target, B * outputs), so the
// micro-batch gradients sum to the gradient of the whole batch; each stage then takes its own
// optimizer step. A small allreduce of the loss ends the step (the step's commit point).
//
// Resilience (--replicas K, --replicate-every N): every N committed steps each rank snapshots its
// layers' parameters + optimizer state and sends a copy to the next K ranks (ring). After a
// failure (ResilientGroup: revoke, shrink, agree) the survivors list the (layer, step) states they
// hold, pick the newest step at which every layer still has a copy, re-partition the layers over
// the survivors, move each layer's state from its holder to its new owner, and roll back to that
// step (data cursor = the batch after it; the steps after it are redone with the same batches, so
// each batch is applied exactly once). Then the replicas are refreshed at once on the new group.
// If a rank and all its buddies died together, the newest checkpoint of --checkpoint-dir is loaded
// instead (said on stderr); with none, training stops with an ftcc::Error naming the lost layers.
//
// Checkpoints use the data-parallel format (the full model and optimizer, gathered on rank 0),
// so --resume works across dp and pp. The summary's final loss, eval metric and SHA-256 are
// computed on rank 0 from the gathered full model (transiently the whole model on rank 0).
#pragma once

#include "ftcc/base/error.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/dp_trainer.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

// Thrown identically on every survivor when part of the model has no copy left (no in-memory
// replica and no checkpoint): the job cannot go on. The new rank 0 has already printed why.
class TrainingStateLost : public ftcc::Error {
 public:
  using ftcc::Error::Error;
};

TrainSummary train_pipeline_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group);

}  // namespace ftcc::train
