// train/checkpoint_store.hpp: a folder of training checkpoints, written atomically, self-verifying.
//
// Checkpoint of step S = two files in the folder:
//   ckpt-<S, 10 digits>.safetensors   model + optimizer state (optim/checkpoint.hpp)
//   ckpt-<S, 10 digits>.json          the record: format "ftcc-train-checkpoint-2", step, epoch,
//                                     data cursor, samples seen and their digest, world size, seed,
//                                     config hash, the run's whole configuration under "config"
//                                     (TrainConfig::to_json with --layers resolved to the model's
//                                     widths), the data file's name and SHA-256 ("sha256"), and
//                                     "record_sha256": the SHA-256 of all of that (record_digest)
// Writing (save): the tensors go to ckpt-S.safetensors.tmp (save_safetensors writes it through
// its own ckpt-S.safetensors.tmp.tmp) and the record to ckpt-S.json.tmp, each fsync'ed; then
// before_commit() runs (the trainers pass ResilientGroup::check_current: a stale process, excluded
// by a newer group, must not commit), then both are renamed, the .json last (its presence commits
// the checkpoint), and the folder is fsync'ed. Every failure to write, fsync, rename or delete
// throws ftcc::IoError naming the path and the system's reason (a full disk is a job error, not a
// configuration error); the temporaries of a failed save are removed.
// record_digest(): SHA-256 (hex) of the record without its "record_sha256", serialised
// canonically: compact JSON with sorted keys (nlohmann::json::dump(); Python's
// json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) gives the same
// bytes for the values ftcc-train writes). It covers every field resume reads and, through
// "sha256", the tensor bytes: any edit of the record (a step, an epoch, a count, the
// configuration) makes it fail.
// newest_valid() walks the checkpoints newest first and takes the first whose record parses and
// verifies and whose data file matches its SHA-256; each one skipped is reported through `notes`
// ("skipping checkpoint PATH: why"). A record of the older format ftcc-train-checkpoint-1
// (written before the record digest) is still accepted: its tensors are verified, its other
// fields cannot be, and a note says so. A store that knows the run's configuration then compares
// it with the one recorded in that checkpoint and throws ftcc::InvalidArgument naming every field
// that must not change on a resume (resume_refusal, train_config.hpp); it does not fall back to an
// older checkpoint, which would silently resume from further back. A checkpoint written before
// configurations were recorded is compared on its seed only (the tensor shapes are checked by
// load) and a note says so. A checkpoint whose tensors do not fit the model (another model) is
// not corrupt: loading it throws.
// The writer's folder (StoreAccess::write) is created and checked writable by the constructor
// (ftcc::IoError otherwise: refused before any training); remove_stale_temporaries() deletes the
// temporaries a killed write left; save() keeps the newest run.keep_checkpoints checkpoints
// (0 = all).
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
#include "ftcc/train/training_progress.hpp"

namespace ftcc::train {

struct CheckpointInfo {
  TrainProgress progress;  // the position the checkpoint holds (its step is the checkpoint's)
  int world_size = 0;
  std::uint64_t seed = 0;
  std::string config_hash;
  std::string path;        // the .safetensors file
  std::int64_t step() const { return progress.step; }
};

// The record format save() writes, and the older one newest_valid() still reads.
inline constexpr const char* kCheckpointFormat = "ftcc-train-checkpoint-2";
inline constexpr const char* kCheckpointFormatV1 = "ftcc-train-checkpoint-1";

// SHA-256 (64 hex digits) of `record` without its "record_sha256" key, dumped as compact JSON with
// sorted keys: what "record_sha256" must hold.
std::string record_digest(const nlohmann::json& record);

// read: the folder is only read (--resume, tools); write: the run's own --checkpoint-dir.
enum class StoreAccess : std::uint8_t { read, write };

class CheckpointStore {
 public:
  // Reads only; nothing is recorded or compared (tools and tests that only read).
  explicit CheckpointStore(std::string dir);
  // The trainers' store: `run` is recorded in every checkpoint saved, with its layers replaced by
  // `widths` (the model built, so that an omitted --layers compares equal to its resolved value),
  // and compared on newest_valid(). With StoreAccess::write the folder is created and must be
  // writable (throws ftcc::IoError naming it and the reason).
  CheckpointStore(std::string dir, const TrainConfig& run, const std::vector<std::int64_t>& widths,
                  StoreAccess access = StoreAccess::write);
  const std::string& dir() const { return dir_; }

  // Writes the checkpoint of info.step(); returns the .safetensors path. before_commit (if set) runs
  // after both files are written and fsync'ed, before they are renamed into place: by throwing it
  // stops the commit (the temporaries are removed). Then the newest run.keep_checkpoints complete
  // checkpoints are kept (the one just written among them) and older ones deleted; checkpoints of
  // later steps than info.step() are left alone. Throws ftcc::IoError on any I/O failure.
  std::string save(const CheckpointInfo& info, const nn::Module& model, const optim::Optimizer& opt,
                   const std::function<void()>& before_commit = {}) const;
  std::optional<CheckpointInfo> newest_valid(const std::function<void(const std::string& note)>& notes = {}) const;
  // Deletes the regular files named like this store's temporaries (ckpt-S.safetensors.tmp,
  // ckpt-S.safetensors.tmp.tmp, ckpt-S.json.tmp), which only a write killed midway leaves; returns
  // their paths. Call it where no other process of the run writes (its rank 0, at start).
  std::vector<std::string> remove_stale_temporaries() const;
  // Loads a checkpoint returned by newest_valid into model and opt (throws nn::FormatError if the
  // tensors do not fit).
  static void load(const CheckpointInfo& info, nn::Module& model, optim::Optimizer& opt);

 private:
  void keep_newest(std::int64_t saved_step) const;

  std::string dir_;
  std::optional<TrainConfig> run_;
};

}  // namespace ftcc::train
