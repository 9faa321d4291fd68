// train/train_config.hpp: everything a training run is told, as parsed from ftcc-train's flags.
//
// validate() rejects impossible combinations with a message naming the flag; canonical() is the
// part that must be identical on every rank (ranks started with different configurations are
// refused at start by comparing its hash). to_json()/from_json() are the record kept in each
// checkpoint; resume_refusal() says whether a checkpoint's record may be resumed with another
// configuration. Which fields may change on --resume is decided in one table (train_config.cpp):
// a new field is added there, with its verdict.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftcc::train {

struct TrainConfig {
  std::string parallel = "dp";                // dp | pp | tp
  std::vector<std::int64_t> layers;           // widths; empty = {features, 64, targets}
  std::string activation = "relu";            // relu | tanh | sigmoid
  std::string dataset = "digits";             // diabetes | digits | synthetic:N:IN:OUT | PATH.csv[.gz] | PATH.npy
  std::int64_t epochs = 0;                    // one of epochs / steps; both 0 = 10 epochs
  std::int64_t steps = 0;
  std::int64_t batch = 64;                    // global batch
  std::int64_t micro_batch = 8;               // micro-batch of the data split (and of --deterministic)
  double lr = 0.05;
  std::string optimizer = "sgd";              // sgd | adam | adamw
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::uint64_t seed = 42;
  std::string device = "cpu";                 // cpu | cuda
  bool deterministic = false;
  std::string on_failure = "keep-global-batch";  // keep-global-batch | keep-local-batch
  std::vector<std::string> inject;            // fault specs (recovery/fault_spec.hpp)
  double hang_timeout_s = 30;                 // 0 = no heartbeat
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  std::string resume;                         // checkpoint folder to resume from
  std::string log_json;
  int metrics_port = -1;                      // < 0: off; 0: any free port
  std::string metrics_bind = "127.0.0.1";
  bool quiet = false;
  std::int64_t log_every = 0;                 // 0: about 20 lines per run
  double held_out = 0.2;                      // held-out fraction for eval_metric
  double bucket_mb = 25;                      // gradient bucket size
  int micro_batches = 4;                      // pipeline micro-batches (pp)
  int replicas = 1;                           // buddy replicas (pp/tp)
  int replicate_every = 1;

  // Throws ftcc::InvalidArgument naming the flag and the accepted values.
  void validate() const;
  // The settings that must agree across ranks, in a stable text form.
  std::string canonical() const;
  // Every field, keyed by its flag's name without "--" ("batch", "micro-batch").
  nlohmann::json to_json() const;
  // The inverse. A field absent from j keeps its default (a record written before the field
  // existed was made by code that behaved as the default does); unknown keys are ignored; a
  // value of the wrong type throws nlohmann::json::exception.
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
