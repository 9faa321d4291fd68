// train/checkpoint_store.hpp: a folder of training checkpoints, written atomically and verified.
//
// Checkpoint of step S = two files in the folder:
//   ckpt-<S, 10 digits>.safetensors   model + optimizer state (optim/checkpoint.hpp), written to a
//                                     temporary name, fsync'ed, renamed
//   ckpt-<S, 10 digits>.json          metadata (step, epoch, data cursor, samples seen, world
//                                     size, seed, config hash) and the SHA-256 of the .safetensors
//                                     file; written the same way, last: its presence commits it
// newest_valid() walks the checkpoints newest first and returns the first whose metadata parses
// and whose checksum matches; each one skipped is reported (why) through `skipped`. A checkpoint
// whose tensors do not fit the model (another model) is not corrupt: loading it throws.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "nn/module.hpp"
#include "optim/optimizer.hpp"

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
  explicit CheckpointStore(std::string dir);
  const std::string& dir() const { return dir_; }

  // Writes the checkpoint of info.step; returns the .safetensors path.
  std::string save(const CheckpointInfo& info, const nn::Module& model, const optim::Optimizer& opt) const;
  std::optional<CheckpointInfo> newest_valid(const std::function<void(const std::string& why)>& skipped = {}) const;
  // Loads a checkpoint returned by newest_valid into model and opt (throws nn::FormatError if the
  // tensors do not fit).
  static void load(const CheckpointInfo& info, nn::Module& model, optim::Optimizer& opt);

 private:
  std::string dir_;
};

}  // namespace ftcc::train
