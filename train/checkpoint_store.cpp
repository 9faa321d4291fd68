#include "ftcc/train/checkpoint_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/optim/checkpoint.hpp"
#include "ftcc/train/state_hash.hpp"

namespace ftcc::train {
namespace fs = std::filesystem;
namespace {

std::string stem_of(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%010lld", static_cast<long long>(step));
  return buf;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Larger data files are not read (a checkpoint of this engine's models is far smaller).
constexpr std::uintmax_t kMaxCheckpointBytes = std::uintmax_t{64} << 30;

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FTCC_CHECK(in.good()) << "cannot read " << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return to_hex(sha256_of_bytes(std::as_bytes(std::span<const char>(bytes))));
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  FTCC_REQUIRE(!ec && fs::is_directory(dir_)) << "--checkpoint-dir '" << dir_ << "' cannot be created: " << ec.message();
}

CheckpointStore::CheckpointStore(std::string dir, const TrainConfig& run, const std::vector<std::int64_t>& widths)
    : CheckpointStore(std::move(dir)) {
  run_ = run;
  run_->layers = widths;
}

std::string CheckpointStore::save(const CheckpointInfo& info, const nn::Module& model, const optim::Optimizer& opt) const {
  const std::string stem = (fs::path(dir_) / stem_of(info.step)).string();
  std::string data_path = stem + ".safetensors";  // not const: returned, so moved out
  const std::string meta_path = stem + ".json";
  const std::string tmp_data = data_path + ".tmp";
  optim::save_checkpoint(tmp_data, model, &opt,
                         {{"step", std::to_string(info.step)}, {"config_hash", info.config_hash}});
  fsync_path(tmp_data);
  fs::rename(tmp_data, data_path);
  nlohmann::json j{{"format", "ftcc-train-checkpoint-1"},
                   {"step", info.step},
                   {"epoch", info.epoch},
                   {"cursor_step", info.cursor_step},
                   {"samples_seen", info.samples_seen},
                   {"samples_digest", data::digest_hex(info.samples_digest)},
                   {"world_size", info.world_size},
                   {"seed", info.seed},
                   {"config_hash", info.config_hash},
                   {"file", fs::path(data_path).filename().string()},
                   {"sha256", file_sha256(data_path)}};
  if (run_) j["config"] = run_->to_json();
  const std::string tmp_meta = meta_path + ".tmp";
  {
    std::ofstream out(tmp_meta, std::ios::trunc);
    out << j.dump(1) << "\n";
    FTCC_CHECK(out.good()) << "cannot write " << tmp_meta;
  }
  fsync_path(tmp_meta);
  fs::rename(tmp_meta, meta_path);
  fsync_path(dir_);
  return data_path;
}

std::optional<CheckpointInfo> CheckpointStore::newest_valid(const std::function<void(const std::string&)>& notes) const {
  std::vector<fs::path> metas;
  std::error_code ec;
  std::vector<fs::path> weights;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && e.path().extension() == ".json") metas.push_back(e.path());
    if (e.path().extension() == ".safetensors") weights.push_back(e.path());
  }
  FTCC_CHECK(!ec) << "cannot list checkpoint folder '" << dir_ << "': " << ec.message();
  // A .safetensors without its .json (weights from elsewhere, or a copy that left it behind):
  // say which file is missing rather than only "no valid checkpoint".
  for (const auto& w : weights) {
    fs::path meta = w;
    meta.replace_extension(".json");
    if (!fs::exists(meta) && notes)
      notes("skipping " + w.string() + ": its metadata file " + meta.filename().string() +
            " is missing (an ftcc checkpoint is a .safetensors with a .json beside it; weights made elsewhere "
            "cannot be resumed, see docs/training.md)");
  }
  std::sort(metas.rbegin(), metas.rend());
  for (const auto& m : metas) {
    auto skip = [&](const std::string& why) {
      if (notes) notes("skipping checkpoint " + m.string() + ": " + why);
    };
    CheckpointInfo info;
    std::optional<TrainConfig> recorded;  // absent in checkpoints written before it was recorded
    try {
      std::ifstream in(m);
      const auto j = nlohmann::json::parse(in);
      if (j.value("format", "") != "ftcc-train-checkpoint-1") {
        skip("not an ftcc training checkpoint");
        continue;
      }
      info.step = j.at("step").get<std::int64_t>();
      info.epoch = j.at("epoch").get<std::int64_t>();
      info.cursor_step = j.at("cursor_step").get<std::int64_t>();
      info.samples_seen = j.at("samples_seen").get<std::int64_t>();
      if (j.contains("samples_digest"))
        info.samples_digest = data::parse_digest_hex(j.at("samples_digest").get<std::string>());
      info.world_size = j.at("world_size").get<int>();
      info.seed = j.at("seed").get<std::uint64_t>();
      info.config_hash = j.at("config_hash").get<std::string>();
      if (j.contains("config")) recorded = TrainConfig::from_json(j.at("config"));
      // Only a plain file name inside this folder, a regular file (no symlink, device or FIFO:
      // /dev/zero would be hashed forever), of bounded size, is read.
      const auto file = j.at("file").get<std::string>();
      if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
          file.find('\0') != std::string::npos) {
        skip("its 'file' field '" + file + "' is not a plain file name in the checkpoint folder");
        continue;
      }
      info.path = (m.parent_path() / file).string();
      std::error_code fec;
      const auto st = fs::symlink_status(info.path, fec);
      if (fec || !fs::exists(st)) {
        skip("its data file " + info.path + " is missing");
        continue;
      }
      if (!fs::is_regular_file(st)) {
        skip("its data file " + info.path + " is not a regular file");
        continue;
      }
      if (fs::file_size(info.path) > kMaxCheckpointBytes) {
        skip("its data file " + info.path + " is larger than " + std::to_string(kMaxCheckpointBytes >> 30) + " GiB");
        continue;
      }
      if (file_sha256(info.path) != j.at("sha256").get<std::string>()) {
        skip("checksum mismatch: " + info.path + " is corrupt or truncated");
        continue;
      }
    } catch (const std::exception& e) {
      skip(std::string("unreadable metadata (") + e.what() + ")");
      continue;
    }
    if (!run_) return info;
    // The newest valid checkpoint is the one to resume: if it is of another configuration, refuse
    // rather than fall back to an older one of this configuration (resuming from further back
    // than the user thinks).
    TrainConfig saved = *run_;  // what an old checkpoint does not record is taken as unchanged
    if (recorded) {
      saved = *recorded;
    } else {
      saved.seed = info.seed;
      if (notes)
        notes("checkpoint " + m.string() + " records no configuration (written by an older ftcc-train): only its seed "
              "and tensor shapes can be checked; the other fields that must match to resume (docs/training.md, "
              "\"What --resume checks\") are taken as unchanged");
    }
    if (const std::string why = resume_refusal(saved, *run_); !why.empty())
      throw ftcc::InvalidArgument("the newest checkpoint (" + m.filename().string() +
                                  ") was written with a different configuration: " + why);
    return info;
  }
  return std::nullopt;
}

void CheckpointStore::load(const CheckpointInfo& info, nn::Module& model, optim::Optimizer& opt) {
  optim::load_checkpoint(info.path, model, &opt);
}

}  // namespace ftcc::train
