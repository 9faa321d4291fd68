// train/train_config.hpp: everything a training run is told, as parsed from ftcc-train's flags.
//
// validate() rejects impossible combinations with a message naming the flag; canonical() is the
// part that must be identical on every rank (ranks started with different configurations are
// refused at start by comparing its hash). to_json()/from_json() are the record kept in each
// checkpoint; resume_refusal() says whether a checkpoint's record may be resumed with another
// configuration. Which fields may change on --resume is decided in one table (train_config.cpp):
// a new field is added there, with its verdict.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ftcc/nn/sequential.hpp"
#include "ftcc/tensor/dtype.hpp"

namespace ftcc::train {

// The choices of ftcc-train, parsed into enums once (parse_choice); no string compared past it.
// dp_pp, dp_tp ("dp,pp", "dp,tp"): replicas of a pipeline or of a tensor-parallel group, the
// gradients summed over the replicas (train/parallel_grid.hpp).
enum class Parallel : std::uint8_t { dp, pp, tp, dp_pp, dp_tp };
// The order of a pipeline's micro-batches (--schedule): every forward then every backward (gpipe),
// or one forward one backward once the pipeline is full (1f1b: at most `stages` micro-batches'
// activations held per rank). Both give the same parameters, bit for bit.
enum class Schedule : std::uint8_t { gpipe, one_f_one_b };
enum class OptimizerKind : std::uint8_t { sgd, adam, adamw };
enum class OnFailure : std::uint8_t { keep_global_batch, keep_local_batch };
// The check of state at rest (--verify-at-rest, train/state_at_rest.hpp): automatic where a unit
// has no live replica to vote with (pp or tp with one model replica, and a hybrid reduced to one),
// on everywhere, or off. Its cost is a digest of the state twice a step.
enum class AtRest : std::uint8_t { automatic, on, off };
// The training loss (--loss): automatic is cross-entropy for a classification data set (digits)
// and MSE for regression; TrainConfig::loss_in_use() resolves it.
enum class LossKind : std::uint8_t { automatic, mse, cross_entropy };
using nn::Activation;
using tensor::Device;

// Each enum's names, as written on the command line and in checkpoints' records.
template <class E>
struct Choices;
template <> struct Choices<Parallel> {
  static constexpr std::array<std::pair<Parallel, const char*>, 5> names{{{Parallel::dp, "dp"},
                                                                          {Parallel::pp, "pp"},
                                                                          {Parallel::tp, "tp"},
                                                                          {Parallel::dp_pp, "dp,pp"},
                                                                          {Parallel::dp_tp, "dp,tp"}}};
};
template <> struct Choices<Schedule> {
  static constexpr std::array<std::pair<Schedule, const char*>, 2> names{
      {{Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"}}};
};
template <> struct Choices<OptimizerKind> {
  static constexpr std::array<std::pair<OptimizerKind, const char*>, 3> names{
      {{OptimizerKind::sgd, "sgd"}, {OptimizerKind::adam, "adam"}, {OptimizerKind::adamw, "adamw"}}};
};
template <> struct Choices<AtRest> {
  static constexpr std::array<std::pair<AtRest, const char*>, 3> names{
      {{AtRest::automatic, "auto"}, {AtRest::on, "on"}, {AtRest::off, "off"}}};
};
template <> struct Choices<OnFailure> {
  static constexpr std::array<std::pair<OnFailure, const char*>, 2> names{
      {{OnFailure::keep_global_batch, "keep-global-batch"}, {OnFailure::keep_local_batch, "keep-local-batch"}}};
};
template <> struct Choices<Activation> {
  static constexpr std::array<std::pair<Activation, const char*>, 3> names{
      {{Activation::ReLU, "relu"}, {Activation::Tanh, "tanh"}, {Activation::Sigmoid, "sigmoid"}}};
};
template <> struct Choices<LossKind> {
  static constexpr std::array<std::pair<LossKind, const char*>, 3> names{
      {{LossKind::automatic, "auto"}, {LossKind::mse, "mse"}, {LossKind::cross_entropy, "cross-entropy"}}};
};
template <> struct Choices<Device> {
  static constexpr std::array<std::pair<Device, const char*>, 2> names{{{Device::CPU, "cpu"}, {Device::CUDA, "cuda"}}};
};

template <class E>
const char* choice_name(E e) {
  for (const auto& [v, n] : Choices<E>::names)
    if (v == e) return n;
  return "?";
}
// "dp, pp or tp"
template <class E>
std::string choice_list() {
  std::string out;
  for (std::size_t i = 0; i < Choices<E>::names.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == Choices<E>::names.size() ? " or " : ", ") + Choices<E>::names[i].second;
  return out;
}
// Throws ftcc::InvalidArgument "--parallel 'xx': expected dp, pp or tp".
[[noreturn]] void refuse_choice(std::string_view flag, std::string_view text, const std::string& expected);
template <class E>
E parse_choice(std::string_view flag, std::string_view text) {
  for (const auto& [v, n] : Choices<E>::names)
    if (text == n) return v;
  refuse_choice(flag, text, choice_list<E>());
}

// Bounds of the counts (validate()): with at most 2^31 - 1 rows a batch and 10^9 steps or epochs, the
// samples a run counts (steps x batch, epochs x rows) stay below 2^63.
inline constexpr std::int64_t kMaxBatch = 2147483647, kMaxSteps = 1000000000, kMaxEpochs = 1000000000;

struct TrainConfig {
  Parallel parallel = Parallel::dp;
  std::vector<std::int64_t> layers;           // widths; empty = {features, 64, targets}
  Activation activation = Activation::ReLU;
  LossKind loss = LossKind::automatic;
  std::string dataset = "digits";             // diabetes | digits | synthetic:N:IN:OUT | PATH.csv[.gz] | PATH.npy
  std::int64_t epochs = 0;                    // one of epochs / steps; both 0 = 10 epochs (0 = not given:
  std::int64_t steps = 0;                     // ftcc-train refuses an explicit --epochs 0 or --steps 0)
  std::int64_t batch = 64;                    // global batch
  std::int64_t micro_batch = 8;               // micro-batch of the data split (and of --deterministic)
  double lr = 0.05;
  OptimizerKind optimizer = OptimizerKind::sgd;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::uint64_t seed = 42;
  Device device = Device::CPU;
  bool deterministic = false;
  OnFailure on_failure = OnFailure::keep_global_batch;
  std::vector<std::string> inject;            // fault specs (recovery/fault_spec.hpp)
  double hang_timeout_s = 30;                 // 0 = no heartbeat
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  std::int64_t keep_checkpoints = 3;          // the newest N complete checkpoints kept after each save; 0 = all
  std::string resume;                         // checkpoint folder to resume from
  std::string init_weights;                   // .safetensors of parameters to start from (fresh optimizer)
  std::string log_json;
  int metrics_port = -1;                      // < 0: off; 0: any free port
  std::string metrics_bind = "127.0.0.1";
  bool quiet = false;
  std::int64_t log_every = 0;                 // 0: about 20 lines per run
  double held_out = 0.2;                      // held-out fraction for eval_metric
  double bucket_mb = 25;                      // gradient bucket size
  bool overlap = true;                        // dp on CPU: allreduce buckets while backward runs
  int micro_batches = 4;                      // pipeline micro-batches (pp)
  Schedule schedule = Schedule::gpipe;        // pipeline schedule (pp, dp,pp)
  int pp_size = 0;                            // dp,pp: ranks per pipeline (0 with other modes)
  int tp_size = 0;                            // dp,tp: ranks per tensor-parallel group
  int replicas = 1;                           // buddy replicas (pp/tp)
  int replicate_every = 1;
  int verify_every = 50;                      // compare the live replicas' state every N steps (0: never)
  AtRest verify_at_rest = AtRest::automatic;  // check each rank's state before use against its digest (train/state_at_rest.hpp)
  bool verify_reductions = false;             // checksum the replicas' gradient sum (comm/reduction_audit.hpp)
  double straggler_factor = 2;                // a rank this many times slower than the median is slow
  int straggler_window = 3;                   // ... at this many checks in a row: a straggler
  bool evict_stragglers = false;              // exclude a straggler (train/straggler_watch.hpp)
  int spares = 0;                             // hot spares: the last N processes wait to replace a lost rank
  int respawns = 0;                           // new processes the job may start to fill lost places

  // Throws ftcc::InvalidArgument naming the flag and the accepted values.
  void validate() const;
  // The loss the run trains with: `loss`, or for automatic, cross-entropy when the data set is a
  // classification set (train/training_data.hpp) and MSE otherwise. Never automatic.
  LossKind loss_in_use() const;
  // pp or dp,pp: the model is cut into pipeline stages; tp or dp,tp: into tensor-parallel shards.
  bool pipeline() const { return parallel == Parallel::pp || parallel == Parallel::dp_pp; }
  bool tensor_parallel() const { return parallel == Parallel::tp || parallel == Parallel::dp_tp; }
  // The ranks one model replica is cut over on `ranks` ranks: one for dp, --pp-size / --tp-size
  // for the hybrid modes, all of them for pp and tp.
  int model_size(int ranks) const {
    return parallel == Parallel::dp      ? 1
           : parallel == Parallel::dp_pp ? pp_size
           : parallel == Parallel::dp_tp ? tp_size
                                         : ranks;
  }
  // The settings that must agree across ranks, in a stable text form.
  std::string canonical() const;
  // Every field, keyed by its flag's name without "--" ("batch", "micro-batch").
  nlohmann::json to_json() const;
  // The inverse. A field absent from j keeps its default (a record written before the field
  // existed was made by code that behaved as the default does), except `loss`: records written
  // before it existed were trained with MSE, so its absence reads as mse. Unknown keys are ignored;
  // a value of the wrong type throws nlohmann::json::exception.
  static TrainConfig from_json(const nlohmann::json& j);
};

// One field in which two configurations differ.
struct ConfigDifference {
  std::string field;            // the flag's name without "--"
  std::string before, after;    // the values as one would write them on the command line
  bool safe_on_resume = false;  // may differ between a checkpoint and the run resuming it
};

// Every field in which `before` and `after` differ, in the table's order.
std::vector<ConfigDifference> config_differences(const TrainConfig& before, const TrainConfig& after);
// "" when a run configured as `now` may resume a checkpoint written by a run configured as
// `saved`; else what differs and must not: "batch 32 (checkpoint) vs 16 (now), seed 1 vs 7;
// these must match to resume (fields safe to change: lr, epochs, ...)".
std::string resume_refusal(const TrainConfig& saved, const TrainConfig& now);

}  // namespace ftcc::train
