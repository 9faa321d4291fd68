// train/checkpoint_store.hpp: a folder of training checkpoints, written atomically and verified.
//
// Checkpoint of step S = two files in the folder:
//   ckpt-<S, 10 digits>.safetensors   model + optimizer state (optim/checkpoint.hpp), written to a
//                                     temporary name, fsync'ed, renamed
//   ckpt-<S, 10 digits>.json          metadata (step, epoch, data cursor, samples seen, world
//                                     size, seed, config hash, the run's whole configuration
//                                     under "config": TrainConfig::to_json with --layers resolved
//                                     to the model's widths) and the SHA-256 of the .safetensors
//                                     file; written the same way, last: its presence commits it
// newest_valid() walks the checkpoints newest first and takes the first whose metadata parses
// and whose checksum matches; each one skipped is reported through `notes` ("skipping checkpoint
// PATH: why"). A store that knows the run's configuration then compares it with the one recorded
// in that checkpoint and throws ftcc::InvalidArgument naming every field that must not change on
// a resume (resume_refusal, train_config.hpp); it does not fall back to an older checkpoint, which
// would silently resume from further back. A checkpoint written before configurations were
// recorded is compared on its seed only (the tensor shapes are checked by load) and a note says
// so. A checkpoint whose tensors do not fit the model (another model) is not corrupt: loading it
// throws.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ftcc/nn/module.hpp"
#include "ftcc/optim/optimizer.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

struct CheckpointInfo {
  std::int64_t step = 0;          // global steps committed
  std::int64_t epoch = 0;         // data cursor
  std::int64_t cursor_step = 0;
  std::int64_t samples_seen = 0;
  int world_size = 0;
  std::uint64_t seed = 0;
  std::string config_hash;
  std::string path;               // the .safetensors file
  std::uint64_t samples_digest = 0;  // data::SampleTally digest of the samples seen (0 in older checkpoints)
};

class CheckpointStore {
 public:
  // Without a run configuration nothing is recorded or compared (tools and tests that only read).
  explicit CheckpointStore(std::string dir);
  // The trainers' store: `run` is recorded in every checkpoint saved, with its layers replaced by
  // `widths` (the model built, so that an omitted --layers compares equal to its resolved value),
  // and compared on newest_valid().
  CheckpointStore(std::string dir, const TrainConfig& run, const std::vector<std::int64_t>& widths);
  const std::string& dir() const { return dir_; }

  // Writes the checkpoint of info.step; returns the .safetensors path.
  std::string save(const CheckpointInfo& info, const nn::Module& model, const optim::Optimizer& opt) const;
  std::optional<CheckpointInfo> newest_valid(const std::function<void(const std::string& note)>& notes = {}) const;
  // Loads a checkpoint returned by newest_valid into model and opt (throws nn::FormatError if the
  // tensors do not fit).
  static void load(const CheckpointInfo& info, nn::Module& model, optim::Optimizer& opt);

 private:
  std::string dir_;
  std::optional<TrainConfig> run_;
};

}  // namespace ftcc::train
