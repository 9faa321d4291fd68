// train/train_config.hpp: everything a training run is told, as parsed from ftcc-train's flags.
//
// validate() rejects impossible combinations with a message naming the flag; canonical() is the
// part that must be identical on every rank (ranks started with different configurations are
// refused at start by comparing its hash).
#pragma once

#include <cstdint>
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
};

}  // namespace ftcc::train
