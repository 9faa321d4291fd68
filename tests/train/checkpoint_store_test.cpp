// tests/train/checkpoint_store_test.cpp: the checkpoint record's digest (what an edit of the
// .json does on resume), the writer's I/O errors (ftcc::IoError, a full disk being /dev/full),
// the folder checked at start, stale temporaries and --keep-checkpoints; no MPI.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/train_config.hpp"

using namespace ftcc::train;
namespace fs = std::filesystem;

namespace {

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ftcc-checkpoint-store-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Saves the checkpoint of `step` (step x 64 samples, cursor at step) with `cfg`.
  std::string save(std::int64_t step, const std::function<void()>& before_commit = {}) {
    auto model = ftcc::nn::mlp(widths_, ftcc::nn::Activation::ReLU, cfg_.seed);
    ftcc::optim::SGD opt(model->named_parameters(), {.lr = cfg_.lr, .momentum = cfg_.momentum});
    CheckpointStore store(dir_.string(), cfg_, widths_);
    const CheckpointInfo info{{.cursor = {0, step}, .step = step, .samples_seen = step * 64,
                               .samples_digest = 0x1234 + static_cast<std::uint64_t>(step)},
                              2, cfg_.seed, "hash", ""};
    return store.save(info, *model, opt, before_commit);
  }
  nlohmann::json record(std::int64_t step) const {
    std::ifstream in(dir_ / name(step, ".json"));
    return nlohmann::json::parse(in);
  }
  void write_record(std::int64_t step, const nlohmann::json& j) const {
    std::ofstream out(dir_ / name(step, ".json"), std::ios::trunc);
    out << j.dump(1) << "\n";
  }
  static std::string name(std::int64_t step, const char* ext) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "ckpt-%010lld%s", static_cast<long long>(step), ext);
    return buf;
  }
  std::set<std::string> files() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.insert(e.path().filename().string());
    return out;
  }
  std::optional<CheckpointInfo> newest(std::vector<std::string>* notes = nullptr) const {
    return CheckpointStore(dir_.string(), cfg_, widths_, StoreAccess::read).newest_valid([&](const std::string& n) {
      if (notes) notes->push_back(n);
    });
  }

  fs::path dir_;
  TrainConfig cfg_;
  std::vector<std::int64_t> widths_{4, 8, 2};
};

TEST_F(CheckpointStoreTest, TheRecordDigestCoversEveryField) {
  save(5);
  const nlohmann::json j = record(5);
  EXPECT_EQ(j.at("format"), kCheckpointFormat);
  EXPECT_EQ(j.at("record_sha256"), record_digest(j));
  // The digest is of the record without itself, dumped compact with sorted keys.
  nlohmann::json without = j;
  without.erase("record_sha256");
  EXPECT_EQ(record_digest(without), record_digest(j));
  EXPECT_EQ(record_digest(j).size(), 64u);
  // Every field resume reads changes the digest.
  for (const char* field : {"step", "epoch", "cursor_step", "samples_seen", "world_size", "seed"}) {
    nlohmann::json edited = j;
    edited[field] = edited[field].get<std::int64_t>() + 1;
    EXPECT_NE(record_digest(edited), record_digest(j)) << field;
  }
  for (const char* field : {"samples_digest", "config_hash", "file", "sha256", "format"}) {
    nlohmann::json edited = j;
    edited[field] = edited[field].get<std::string>() + "0";
    EXPECT_NE(record_digest(edited), record_digest(j)) << field;
  }
  nlohmann::json edited = j;
  edited["config"]["lr"] = 0.5;
  EXPECT_NE(record_digest(edited), record_digest(j));
  // Not the layout: the same record written with other whitespace verifies.
  std::ofstream(dir_ / name(5, ".json"), std::ios::trunc) << j.dump(4);
  ASSERT_TRUE(newest().has_value());
}

TEST_F(CheckpointStoreTest, AnEditedRecordIsSkippedWithANoteAndTheOlderOneResumed) {
  save(5);
  save(10);
  // Editing "step" used to resume 13,700 steps of a 9,200-step run; "epoch" made the exactly-once
  // check fail only at the end.
  for (const char* field : {"step", "epoch", "samples_seen", "cursor_step"}) {
    nlohmann::json j = record(10);
    const nlohmann::json good = j;
    j[field] = j[field].get<std::int64_t>() + 3;
    write_record(10, j);
    std::vector<std::string> notes;
    const auto info = newest(&notes);
    ASSERT_TRUE(info.has_value()) << field;
    EXPECT_EQ(info->step(), 5) << field;
    ASSERT_EQ(notes.size(), 1u) << field;
    EXPECT_EQ(notes[0], "skipping checkpoint " + (dir_ / name(10, ".json")).string() +
                            ": its record does not verify (record_sha256 mismatch): " + name(10, ".json") +
                            " was edited or damaged")
        << field;
    write_record(10, good);
    EXPECT_EQ(newest()->step(), 10) << field;
  }
  // A record without its digest, or a new record whose format was set back to 1.
  nlohmann::json j = record(10);
  j.erase("record_sha256");
  write_record(10, j);
  std::vector<std::string> notes;
  EXPECT_EQ(newest(&notes)->step(), 5);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("has no record_sha256"), std::string::npos) << notes[0];
  j = record(5);
  j["format"] = kCheckpointFormatV1;
  write_record(5, j);
  notes.clear();
  EXPECT_FALSE(newest(&notes).has_value());  // nothing valid left: the caller's "no valid checkpoint"
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("says format ftcc-train-checkpoint-1 but holds a record_sha256"), std::string::npos) << notes[1];
}

TEST_F(CheckpointStoreTest, AnEditedRecordWithItsDigestRecomputedVerifies) {
  // The digest guards against edits and damage, not against someone who recomputes it (the
  // exactly-once check at the end of a run still catches a wrong data cursor).
  save(5);
  nlohmann::json j = record(5);
  j["epoch"] = 1;
  j["record_sha256"] = record_digest(j);
  write_record(5, j);
  const auto info = newest();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->progress.cursor.epoch, 1);
  EXPECT_EQ(info->progress.samples_digest, 0x1234u + 5);
}

TEST_F(CheckpointStoreTest, AnOldFormatRecordIsResumedWithANote) {
  save(5);
  nlohmann::json j = record(5);
  j.erase("record_sha256");
  j["format"] = kCheckpointFormatV1;
  write_record(5, j);
  std::vector<std::string> notes;
  const auto info = newest(&notes);
  ASSERT_TRUE(info.has_value());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("older format ftcc-train-checkpoint-1 (no record digest): its tensors are verified"),
            std::string::npos)
      << notes[0];
  // Its tensors are still checked.
  {
    std::fstream f(dir_ / name(5, ".safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  notes.clear();
  EXPECT_FALSE(newest(&notes).has_value());
  EXPECT_NE(notes.at(0).find("checksum mismatch"), std::string::npos) << notes.at(0);
}

TEST_F(CheckpointStoreTest, BeforeCommitRunsBeforeTheRenamesAndCanStopTheCommit) {
  bool called = false;
  save(5, [&] {
    called = true;
    // Both files written, neither in place yet.
    EXPECT_TRUE(fs::exists(dir_ / (name(5, ".safetensors") + ".tmp")));
    EXPECT_TRUE(fs::exists(dir_ / (name(5, ".json") + ".tmp")));
    EXPECT_FALSE(fs::exists(dir_ / name(5, ".safetensors")));
    EXPECT_FALSE(fs::exists(dir_ / name(5, ".json")));
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(files(), (std::set<std::string>{name(5, ".json"), name(5, ".safetensors")}));
  // A stale process (excluded by a newer group) must not commit: nothing of step 10 stays.
  EXPECT_THROW(save(10, [] { throw ftcc::Error("superseded"); }), ftcc::Error);
  EXPECT_EQ(files(), (std::set<std::string>{name(5, ".json"), name(5, ".safetensors")}));
}

TEST_F(CheckpointStoreTest, AFullDiskIsAnIoErrorNamingTheFileAndNothingIsLeft) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  save(5);
  const auto before = files();
  // The record's temporary is /dev/full: every write fails with ENOSPC, as on a full disk (a
  // buffered stream used to report nothing, and the rename committed a record that was /dev/full).
  fs::create_symlink("/dev/full", dir_ / (name(10, ".json") + ".tmp"));
  try {
    save(10);
    FAIL() << "a failed write was not reported";
  } catch (const ftcc::IoError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write checkpoint file '" + (dir_ / (name(10, ".json") + ".tmp")).string() +
                                         "': No space left on device");
  }
  auto after = files();
  after.erase(name(10, ".json") + ".tmp");  // the symlink: not a file the store wrote, left as it was
  EXPECT_EQ(after, before);
  fs::remove(dir_ / (name(10, ".json") + ".tmp"));
  // The tensors' temporary full: an IoError too (was a plain ftcc::Error).
  fs::create_symlink("/dev/full", dir_ / (name(10, ".safetensors") + ".tmp.tmp"));
  try {
    save(10);
    FAIL() << "a failed write was not reported";
  } catch (const ftcc::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(name(10, ".safetensors") + ".tmp.tmp' failed (disk full?)"), std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointStoreTest, ASymlinkAtATemporaryNameIsNeverCommitted) {
  // Writes through it succeed (/dev/null), but the record would be a symlink: refused, nothing committed.
  fs::create_directories(dir_);
  fs::create_symlink("/dev/null", dir_ / (name(5, ".json") + ".tmp"));
  try {
    save(5);
    FAIL() << "a symlink was committed as the record";
  } catch (const ftcc::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files(), (std::set<std::string>{name(5, ".json") + ".tmp"}));
}

TEST_F(CheckpointStoreTest, TheWritersFolderIsCheckedAtOpen) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "a-file") << "x";
  const std::string under_file = (dir_ / "a-file" / "ck").string();
  try {
    CheckpointStore(under_file, cfg_, widths_);
    FAIL() << "a folder under a file was accepted";
  } catch (const ftcc::IoError& e) {
    EXPECT_EQ(std::string(e.what()), "--checkpoint-dir '" + under_file + "' cannot be created: Not a directory");
  }
  try {
    CheckpointStore((dir_ / "a-file").string(), cfg_, widths_);
    FAIL() << "a file was accepted as the folder";
  } catch (const ftcc::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("--checkpoint-dir '" + (dir_ / "a-file").string() + "'"), std::string::npos);
  }
  // Reading (--resume) neither creates nor checks anything.
  const fs::path missing = dir_ / "missing";
  CheckpointStore reader(missing.string(), cfg_, widths_, StoreAccess::read);
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_THROW(reader.newest_valid(), ftcc::IoError);  // listing a missing folder
}

TEST_F(CheckpointStoreTest, StaleTemporariesAreRemovedAndNothingElse) {
  save(5);
  fs::create_directories(dir_ / "sub");
  const std::vector<std::string> stale = {name(6, ".safetensors") + ".tmp", name(6, ".safetensors") + ".tmp.tmp",
                                          name(6, ".json") + ".tmp"};
  const std::vector<std::string> kept = {"ckpt-6.json.tmp", "notes.tmp", name(6, ".json") + ".tmp.1",
                                         "x" + name(6, ".json") + ".tmp"};
  for (const auto& n : stale) std::ofstream(dir_ / n) << "partial";
  for (const auto& n : kept) std::ofstream(dir_ / n) << "not ours";
  fs::create_symlink("/dev/null", dir_ / (name(7, ".json") + ".tmp"));  // not a file the store wrote
  const auto removed = CheckpointStore(dir_.string(), cfg_, widths_).remove_stale_temporaries();
  std::vector<std::string> expected;
  for (const auto& n : stale) expected.push_back((dir_ / n).string());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  std::set<std::string> want = {name(5, ".json"), name(5, ".safetensors"), "sub", name(7, ".json") + ".tmp"};
  want.insert(kept.begin(), kept.end());
  EXPECT_EQ(files(), want);
}

TEST_F(CheckpointStoreTest, KeepCheckpointsKeepsTheNewestComplete) {
  cfg_.keep_checkpoints = 2;
  for (std::int64_t s : {1, 2, 3, 4}) save(s);
  EXPECT_EQ(files(), (std::set<std::string>{name(3, ".json"), name(3, ".safetensors"), name(4, ".json"),
                                            name(4, ".safetensors")}));
  // A later checkpoint (of an earlier, longer run) is left alone and not counted; the one just
  // written is always kept.
  cfg_.keep_checkpoints = 1;
  fs::copy_file(dir_ / name(4, ".json"), dir_ / name(9, ".json"));
  fs::copy_file(dir_ / name(4, ".safetensors"), dir_ / name(9, ".safetensors"));
  save(5);
  EXPECT_EQ(files(), (std::set<std::string>{name(5, ".json"), name(5, ".safetensors"), name(9, ".json"),
                                            name(9, ".safetensors")}));
  // 0 keeps all.
  cfg_.keep_checkpoints = 0;
  save(6);
  save(7);
  EXPECT_EQ(files().size(), 8u);
}

}  // namespace
