#include "ftcc/train/checkpoint_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
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

// "PATH: No space left on device" from errno (captured by the caller right after the failed call).
[[noreturn]] void throw_io(const std::string& what, const std::string& path, int err) {
  throw ftcc::IoError(what + " '" + path + "': " + (err != 0 ? std::strerror(err) : "failed"));  // NOLINT(concurrency-mt-unsafe): messages only
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io("cannot open checkpoint file", path, errno);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw_io("cannot fsync checkpoint file", path, err);
  }
  ::close(fd);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io("cannot open checkpoint folder", dir, errno);
  // EINVAL: a file system that cannot sync a folder (the renames are still made).
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(fd);
    throw_io("cannot fsync checkpoint folder", dir, err);
  }
  ::close(fd);
}

// Writes `text` to `path` (created or truncated), fsync'ed; every failure (a full disk included,
// which a buffered stream would only report at a close nobody checks) throws IoError.
void write_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io("cannot create checkpoint file", path, errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      throw_io("cannot write checkpoint file", path, err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) {  // EINVAL: not a file that can be synced
    const int err = errno;
    ::close(fd);
    throw_io("cannot fsync checkpoint file", path, err);
  }
  if (::close(fd) != 0) throw_io("cannot close checkpoint file", path, errno);
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) throw_io("cannot rename checkpoint file", from + "' to '" + to, errno);
}

// Removes `path` if it is a regular file (never what a symlink points to, nor a folder).
bool remove_regular(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(path, ec))) return false;
  return fs::remove(path, ec);
}

// Larger data files are not read (a checkpoint of this engine's models is far smaller).
constexpr std::uintmax_t kMaxCheckpointBytes = std::uintmax_t{64} << 30;

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) throw_io("cannot read checkpoint file", path, errno);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return to_hex(sha256_of_bytes(std::as_bytes(std::span<const char>(bytes))));
}

// The names this store gives its files: ckpt-<step>.json, and its temporaries.
const std::regex& record_name() {
  static const std::regex re(R"(ckpt-([0-9]{10,18})\.json)");
  return re;
}
const std::regex& temporary_name() {
  static const std::regex re(R"(ckpt-[0-9]{10,18}\.(safetensors\.tmp|safetensors\.tmp\.tmp|json\.tmp))");
  return re;
}

}  // namespace

std::string record_digest(const nlohmann::json& record) {
  nlohmann::json covered = record;
  if (covered.is_object()) covered.erase("record_sha256");
  const std::string text = covered.dump();  // compact; nlohmann::json objects keep their keys sorted
  return to_hex(sha256_of_bytes(std::as_bytes(std::span<const char>(text.data(), text.size()))));
}

CheckpointStore::CheckpointStore(std::string dir) : dir_(std::move(dir)) {}

CheckpointStore::CheckpointStore(std::string dir, const TrainConfig& run, const std::vector<std::int64_t>& widths,
                                 StoreAccess access)
    : dir_(std::move(dir)) {
  run_ = run;
  run_->layers = widths;
  if (access == StoreAccess::read) return;
  // Found out now, before any training, not at the first checkpoint. Not a configuration error:
  // the same flag works where the folder can be written (a full or read-only disk is the job's
  // environment failing), so it is a job error (exit 4), as a failed write later is.
  const std::string flag = "--checkpoint-dir '" + dir_ + "'";
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw ftcc::IoError(flag + " cannot be created: " + ec.message());
  if (!fs::is_directory(dir_, ec)) throw ftcc::IoError(flag + " is not a folder");
  if (::access(dir_.c_str(), W_OK | X_OK) != 0)
    throw ftcc::IoError(flag + " cannot be written: " + std::strerror(errno));  // NOLINT(concurrency-mt-unsafe): messages only
}

std::string CheckpointStore::save(const CheckpointInfo& info, const nn::Module& model, const optim::Optimizer& opt,
                                  const std::function<void()>& before_commit) const {
  const std::string stem = (fs::path(dir_) / stem_of(info.step())).string();
  std::string data_path = stem + ".safetensors";  // not const: returned, so moved out
  const std::string meta_path = stem + ".json";
  const std::string tmp_data = data_path + ".tmp";
  const std::string tmp_meta = meta_path + ".tmp";
  // A save that fails leaves none of its temporaries (a full disk gets its space back).
  auto drop_temporaries = [&] {
    remove_regular(tmp_data + ".tmp");
    remove_regular(tmp_data);
    remove_regular(tmp_meta);
  };
  try {
    try {
      errno = 0;
      optim::save_checkpoint(tmp_data, model, &opt,
                             {{"step", std::to_string(info.step())}, {"config_hash", info.config_hash}});
    } catch (const ftcc::InvalidArgument&) {
      throw;  // a bad tensor name: a bug, not the disk
    } catch (const ftcc::IoError&) {
      throw;
    } catch (const ftcc::Error& e) {
      const int err = errno;
      throw ftcc::IoError(std::string("writing checkpoint: ") + e.what() +
                          (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));  // NOLINT(concurrency-mt-unsafe): messages only
    }
    fsync_file(tmp_data);
    nlohmann::json j{{"format", kCheckpointFormat},
                     {"world_size", info.world_size},
                     {"seed", info.seed},
                     {"config_hash", info.config_hash},
                     {"file", fs::path(data_path).filename().string()},
                     {"sha256", file_sha256(tmp_data)}};
    info.progress.write_to(j);
    if (run_) j["config"] = run_->to_json();
    j["record_sha256"] = record_digest(j);
    write_durably(tmp_meta, j.dump(1) + "\n");
    // What is committed is a regular file this store wrote, never a symlink found at a temporary
    // name (the write went through it: the checkpoint would be wherever it points).
    for (const std::string& path : {tmp_data, tmp_meta}) {
      std::error_code sec;
      if (!fs::is_regular_file(fs::symlink_status(path, sec)))
        throw ftcc::IoError("cannot commit checkpoint file '" + path + "': not a regular file (a symlink or device at the "
                            "store's temporary name)");
    }
    if (before_commit) before_commit();
    rename_or_throw(tmp_data, data_path);
    rename_or_throw(tmp_meta, meta_path);
    fsync_dir(dir_);
  } catch (...) {
    drop_temporaries();
    throw;
  }
  if (run_ && run_->keep_checkpoints > 0) keep_newest(info.step());
  return data_path;
}

void CheckpointStore::keep_newest(std::int64_t saved_step) const {
  // Complete checkpoints (a record and its data file) up to the one just saved, newest first.
  std::vector<std::pair<std::int64_t, std::string>> complete;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, record_name())) continue;
    const std::int64_t step = std::stoll(m[1].str());
    fs::path data = e.path();
    data.replace_extension(".safetensors");
    std::error_code dec;
    if (step <= saved_step && fs::exists(data, dec)) complete.emplace_back(step, e.path().string());
  }
  if (ec) throw_io("cannot list checkpoint folder", dir_, ec.value());
  std::sort(complete.rbegin(), complete.rend());
  for (std::size_t i = static_cast<std::size_t>(run_->keep_checkpoints); i < complete.size(); ++i) {
    // The record first: a deletion cut short leaves a data file without a record (skipped on
    // resume, with a note), never a record without its data.
    fs::path data = complete[i].second;
    data.replace_extension(".safetensors");
    for (const std::string& path : {complete[i].second, data.string()})
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_io("cannot delete old checkpoint file", path, errno);
  }
}

std::vector<std::string> CheckpointStore::remove_stale_temporaries() const {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, temporary_name())) continue;
    std::error_code sec;
    if (!fs::is_regular_file(e.symlink_status(sec))) continue;  // not a file this store wrote
    if (::unlink(e.path().c_str()) != 0 && errno != ENOENT)
      throw_io("cannot delete stale temporary checkpoint file", e.path().string(), errno);
    removed.push_back(e.path().string());
  }
  if (ec) throw_io("cannot list checkpoint folder", dir_, ec.value());
  std::sort(removed.begin(), removed.end());
  return removed;
}

namespace {

using Notes = std::function<void(const std::string&)>;

// One checkpoint record as read: its fields, the configuration it records (absent in records
// written before it was), and whether it is of the older format (no record digest).
struct ReadRecord {
  CheckpointInfo info;
  std::optional<TrainConfig> recorded;
  bool old_format = false;
};

// The checkpoint records (ckpt-*.json) of `dir`, newest first; a .safetensors without its .json
// (weights from elsewhere, or a copy that left it behind) is named in a note, rather than only
// "no valid checkpoint".
std::vector<fs::path> list_records(const std::string& dir, const Notes& notes) {
  std::vector<fs::path> metas, weights;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && e.path().extension() == ".json") metas.push_back(e.path());
    if (e.path().extension() == ".safetensors") weights.push_back(e.path());
  }
  if (ec) throw_io("cannot list checkpoint folder", dir, ec.value());
  for (const auto& w : weights) {
    fs::path meta = w;
    meta.replace_extension(".json");
    if (!fs::exists(meta) && notes)
      notes("skipping " + w.string() + ": its metadata file " + meta.filename().string() +
            " is missing (an ftcc checkpoint is a .safetensors with a .json beside it; weights made elsewhere "
            "cannot be resumed, see docs/training.md)");
  }
  std::sort(metas.rbegin(), metas.rend());
  return metas;
}

// The data file a record names, when it is a plain file name inside the folder and a regular file
// (no symlink, device or FIFO: /dev/zero would be hashed forever) of bounded size; otherwise why not.
std::string data_file_refusal(const fs::path& meta, const std::string& file, std::string& path) {
  if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
      file.find('\0') != std::string::npos)
    return "its 'file' field '" + file + "' is not a plain file name in the checkpoint folder";
  path = (meta.parent_path() / file).string();
  std::error_code fec;
  const auto st = fs::symlink_status(path, fec);
  if (fec || !fs::exists(st)) return "its data file " + path + " is missing";
  if (!fs::is_regular_file(st)) return "its data file " + path + " is not a regular file";
  if (fs::file_size(path) > kMaxCheckpointBytes)
    return "its data file " + path + " is larger than " + std::to_string(kMaxCheckpointBytes >> 30) + " GiB";
  return "";
}

// The metadata of a safetensors file (its header's "__metadata__"), read from the header alone;
// empty when the file has none or cannot be read (the SHA-256 check then decides).
std::map<std::string, std::string> data_file_metadata(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8] = {};
  if (!in.read(reinterpret_cast<char*>(len), 8)) return out;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n == 0 || n > (100u << 20)) return out;
  std::string header(static_cast<std::size_t>(n), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return out;
  const auto j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("__metadata__") || !j["__metadata__"].is_object()) return out;
  for (const auto& [k, v] : j["__metadata__"].items())
    if (v.is_string()) out[k] = v.get<std::string>();
  return out;
}

// Reads and verifies one record (format, record digest, data file, its SHA-256, the step and
// configuration the data file itself holds); returns what it says, or nothing after calling
// skip(why).
std::optional<ReadRecord> read_record(const fs::path& m, const Notes& skip) {
  ReadRecord r;
  try {
    std::ifstream in(m);
    const auto j = nlohmann::json::parse(in);
    const std::string format = j.value("format", "");
    if (format != kCheckpointFormat && format != kCheckpointFormatV1) {
      skip("not an ftcc training checkpoint");
      return std::nullopt;
    }
    r.old_format = format == kCheckpointFormatV1;
    // A record digest in a record of the old format: a new record whose format was edited.
    if (r.old_format == j.contains("record_sha256")) {
      skip(r.old_format ? "its record says format " + format + " but holds a record_sha256 (edited?)"
                        : "its record has no record_sha256 (edited, or not written by ftcc-train)");
      return std::nullopt;
    }
    CheckpointInfo& info = r.info;
    info.progress = TrainProgress::read_from(j);
    info.world_size = j.at("world_size").get<int>();
    info.seed = j.at("seed").get<std::uint64_t>();
    info.config_hash = j.at("config_hash").get<std::string>();
    if (j.contains("config")) r.recorded = TrainConfig::from_json(j.at("config"));
    if (const std::string why = data_file_refusal(m, j.at("file").get<std::string>(), info.path); !why.empty()) {
      skip(why);
      return std::nullopt;
    }
    // Every field read above (and the data file's SHA-256 checked below) is covered: an edited
    // or damaged record is not trusted, whatever field changed.
    if (!r.old_format && record_digest(j) != j.at("record_sha256").get<std::string>()) {
      skip("its record does not verify (record_sha256 mismatch): " + m.filename().string() + " was edited or damaged");
      return std::nullopt;
    }
    if (file_sha256(info.path) != j.at("sha256").get<std::string>()) {
      skip("checksum mismatch: " + info.path + " is corrupt or truncated");
      return std::nullopt;
    }
    // The data file (verified above) records its step and configuration too: a record of the
    // older format, which has no digest, cannot claim another step (a record downgraded to that
    // format and its step edited trained 2,100 steps fewer, with exit 0).
    const auto meta = data_file_metadata(info.path);
    if (const auto it = meta.find("step"); it != meta.end() && it->second != std::to_string(info.step())) {
      skip("its record says step " + std::to_string(info.step()) + " but its data file holds step " + it->second +
           " (edited?)");
      return std::nullopt;
    }
    if (const auto it = meta.find("config_hash"); it != meta.end() && it->second != info.config_hash) {
      skip("its record's config_hash differs from its data file's (edited?)");
      return std::nullopt;
    }
  } catch (const std::exception& e) {
    skip(std::string("unreadable metadata (") + e.what() + ")");
    return std::nullopt;
  }
  return r;
}

}  // namespace

std::optional<CheckpointInfo> CheckpointStore::newest_valid(const Notes& notes) const {
  for (const auto& m : list_records(dir_, notes)) {
    const auto r = read_record(m, [&](const std::string& why) {
      if (notes) notes("skipping checkpoint " + m.string() + ": " + why);
    });
    if (!r) continue;
    if (r->old_format && notes)
      notes("checkpoint " + m.string() + " is of the older format " + kCheckpointFormatV1 +
            " (no record digest): its tensors are verified, its step, data cursor and sample counts cannot be");
    if (!run_) return r->info;
    // The newest valid checkpoint is the one to resume: if it is of another configuration, refuse
    // rather than fall back to an older one of this configuration (resuming from further back
    // than the user thinks).
    TrainConfig saved = *run_;  // what an old checkpoint does not record is taken as unchanged
    if (r->recorded) {
      saved = *r->recorded;
    } else {
      saved.seed = r->info.seed;
      if (notes)
        notes("checkpoint " + m.string() + " records no configuration (written by an older ftcc-train): only its seed "
              "and tensor shapes can be checked; the other fields that must match to resume (docs/training.md, "
              "\"What --resume checks\") are taken as unchanged");
    }
    if (const std::string why = resume_refusal(saved, *run_); !why.empty())
      throw ftcc::InvalidArgument("the newest checkpoint (" + m.filename().string() +
                                  ") was written with a different configuration: " + why);
    return r->info;
  }
  return std::nullopt;
}

void CheckpointStore::load(const CheckpointInfo& info, nn::Module& model, optim::Optimizer& opt) {
  optim::load_checkpoint(info.path, model, &opt);
}

}  // namespace ftcc::train
