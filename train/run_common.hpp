// train/run_common.hpp: what the training driver and the tools share: the summary, the errors, the
// factories of the optimizer and the model, evaluation, the cross-rank configuration and progress
// checks (the position itself is TrainProgress, training_progress.hpp), and the start-up step in
// which rank 0 reads a checkpoint (or an initial weights file) and every rank learns its verdict.
//
// Every function taking a Communicator is collective over it and gives every rank the same
// result or the same exception (the verdicts are broadcast before anyone throws).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/data/dataset.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/nn/module.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/optimizer.hpp"
#include "ftcc/recovery/recovery_event.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/tensor.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/state_hash.hpp"
#include "ftcc/train/train_config.hpp"
#include "ftcc/train/training_progress.hpp"

namespace ftcc::train {

struct TrainSummary {
  std::string loss_name;      // the training loss: "mse" or "cross-entropy" (--loss)
  double final_loss = 0;      // that loss over the whole training set with the final parameters
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
  nlohmann::json step_ms;           // this rank's median ms per step phase (train/step_breakdown.hpp)
  nlohmann::json wall_split_s;      // wall_s as set-up (of which data), steps and final evaluation
  // The final layout of the ranks: dp "4 ranks"; pp, tp and the hybrids "2 replicas x 2 ranks"
  // (train/parallel_grid.hpp).
  std::string grid;
  // Where the tensors lived (--device): "cpu" or "cuda".
  std::string device;
  // The largest, over the ranks, of the bytes CPU tensors held at once during the steps
  // (tensor/storage.hpp: data, model, optimizer state, activations, buffers; --device cuda: the
  // host side only).
  std::int64_t peak_tensor_bytes = 0;

  nlohmann::json to_json() const;
  // The summary every trainer ends with; wall_s and samples_per_s are measured from `start`.
  static TrainSummary of_run(LossKind loss, double final_loss, double last_step_loss, bool classification,
                             double eval_metric,
                             std::int64_t steps, std::int64_t epochs, int world_size_initial,
                             const recovery::ResilientGroup& group, const data::SampleTally& seen,
                             const data::SampleTally& expected, std::string param_sha256,
                             std::chrono::steady_clock::time_point start);
};

// Thrown identically on every survivor when part of the model has no copy left (no in-memory
// replica and no checkpoint): the job cannot go on. The new rank 0 has already printed why.
class TrainingStateLost : public ftcc::Error {
 public:
  using ftcc::Error::Error;
};

// Throws ftcc::Error ("non-finite loss (nan) at step 12: the training diverged (lower --lr, now
// 0.05) or the data holds NaN/Inf values", or "non-finite gradient (loss 3.5) at step 12: ...")
// when a step's loss or gradients are NaN or infinite. Pass values every rank holds after the
// step's allreduce, so that every rank throws at the same step with the same message.
void require_finite(double reduced_loss, bool gradients_finite, std::int64_t step, const TrainConfig& cfg);

// Throws ftcc::Error (every rank alike: the summary's figures are agreed) when the exactly-once
// check of a finished run fails: the samples its committed steps fed (count and digest) are not
// what the batches before its final data cursor hold. The run trained on other data than it was
// configured for (a checkpoint or a recovery restored a wrong progress): a job-level error, exit 4.
void require_samples_exact(const TrainSummary& s);

// Throws ftcc::InvalidArgument when --batch is larger than the training set (`train_rows`): every
// step would then take the whole set, not the batch asked for.
void require_batch_fits(const TrainConfig& cfg, std::int64_t train_rows);

// What the trainers pass to CheckpointStore::save as before_commit: the group's check that this
// process still belongs to the job (ResilientGroup::check_current throws recovery::Superseded in a
// stale copy, stopped and excluded by a newer group, so that it never commits a checkpoint).
std::function<void()> commit_check(const recovery::ResilientGroup& g, std::int64_t step);

// The run's rank 0 at start (not a spare, nor a process started by a respawn, which join a run in
// progress whose rank 0 may be writing) deletes the temporaries an interrupted write left in the
// checkpoint folder, and notes each one.
void remove_stale_temporaries(const CheckpointStore& store, const recovery::ResilientGroup& g, RunLog& log);

// After a rollback to `step`: each rank passes its progress recorded at that step (nullptr if it
// has none). Returns the one of the lowest rank that has it, after checking that every rank that
// has one agrees on all of it, samples digest included (throws ftcc::Error otherwise, or when
// none has it). An allgather.
TrainProgress agree_progress(comm::Communicator& c, const TrainProgress* mine, std::int64_t step);

// The ranks (of c) whose 256-bit value differs from rank 0's. An allgather.
std::vector<int> ranks_differing(comm::Communicator& c, const Digest& mine);

// Throws ftcc::InvalidArgument (same text on every rank) when the ranks were started with
// different configurations; returns the configuration's hash.
Digest check_same_config(const TrainConfig& cfg, comm::Communicator& c, const std::vector<int>& members);
// The configuration's hash alone (what check_same_config compares): for a process started by a
// respawn, which runs the job's own command line and joins a recovery in progress.
Digest config_digest(const TrainConfig& cfg);

// The optimizer of --optimizer/--lr/--momentum/--weight-decay over `params` (a whole model or a
// stage or shard of it: the state is per tensor, so the pieces together are the whole's).
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& cfg, const nn::NamedTensors& params);
// The activation of --activation applied to x (recorded for autograd).
tensor::Tensor activate(Activation a, const tensor::Tensor& x);
// The same activation as the fused op's argument: tensor::linear(x, W, b, as_fused(a)) computes
// activate(a, tensor::linear(x, W, b)), bit for bit, in one op.
tensor::Activation as_fused(Activation a);

// A whole model and its optimizer, as checkpoints hold them: nn::mlp(widths, activation, seed).
struct FullModel {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
  // Parameters, then the optimizer state, in the canonical order.
  nn::NamedTensors state() const;
};
FullModel make_full_model(const TrainConfig& cfg, const std::vector<std::int64_t>& widths);

// The loss of one micro-batch (`out` against targets `y`) of a global batch of `global_rows` rows,
// scaled so that the micro-batches' gradients add up to the gradient of the whole batch's mean
// loss: MSE divides by global_rows x outputs, cross-entropy by global_rows. `loss` is a loss in
// use (TrainConfig::loss_in_use), not automatic.
tensor::Tensor batch_loss(LossKind loss, const tensor::Tensor& out, const tensor::Tensor& y, std::int64_t global_rows);

// The mean loss (MSE per element, or cross-entropy per row) of model over all of d, and
// classification accuracy (argmax) over d, on device `dev`.
double loss_on(nn::Module& model, const data::Dataset& d, LossKind loss, Device dev = Device::CPU);
double accuracy_on(nn::Module& model, const data::Dataset& d, Device dev = Device::CPU);

// The same figures as final_metrics without the digest, computed by every rank of c on its share of
// the data: fixed chunks of kEvalChunk rows, chunk i on rank i % n, each chunk's sum of losses
// (or correct answers) accumulated in double and the chunks summed in their order after an
// allreduce, so the result is bitwise the same for any rank count. Collective.
inline constexpr std::int64_t kEvalChunk = 256;
struct EvalFigures {
  double train_loss = 0, eval = 0;
};
EvalFigures evaluate_split(comm::Communicator& c, nn::Module& model, const data::Dataset& train,
                           const data::Dataset& test, bool classification, LossKind loss, Device dev);

// End-of-run figures, computed on rank 0 from the full model (`model` is only read there and may
// be null elsewhere) and broadcast: the training loss, held-out metric (accuracy for classification,
// else MSE), SHA-256 of the parameters.
struct FinalMetrics {
  double train_loss = 0, eval = 0;
  Digest digest{};
};
FinalMetrics final_metrics(comm::Communicator& c, nn::Module* model, const data::Dataset& train,
                           const data::Dataset& test, bool classification, LossKind loss,
                           Device dev = Device::CPU);

// What a start from a file gave: the progress to continue from and the file.
struct StartPoint {
  TrainProgress progress;
  std::string path;
};

// Rank 0 reads the newest valid checkpoint of `dir` into model and opt (only used on rank 0; null
// elsewhere) and every rank learns the verdict. Returns nullopt when `dir` holds none;
// throws ftcc::InvalidArgument, prefixed by `flag` ("--resume 'DIR': ..."), when it does not
// exist, does not fit the model, or was written with a configuration that must not change
// (CheckpointStore). The folder is only read, never created.
std::optional<StartPoint> load_checkpoint_on_rank0(comm::Communicator& c, const std::string& dir, const char* flag,
                                                   const TrainConfig& cfg, const std::vector<std::int64_t>& widths,
                                                   RunLog& log, nn::Module* model, optim::Optimizer* opt);

// Rank 0 reads --init-weights into model (only used on rank 0; every parameter by name and shape; other tensors in
// the file, such as a checkpoint's optimizer state, are ignored) and every rank learns the
// verdict; throws ftcc::InvalidArgument naming the file and the problem.
void load_init_weights_on_rank0(comm::Communicator& c, const TrainConfig& cfg, nn::Module* model);

}  // namespace ftcc::train
