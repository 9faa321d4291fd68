// tests/train/resume_config_test.cpp: what --resume checks (train/train_config.hpp's field table,
// config_differences, resume_refusal) and where (CheckpointStore::newest_valid), without MPI.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "ftcc/base/error.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/train_config.hpp"

using namespace ftcc::train;
namespace fs = std::filesystem;

namespace {

// The number of members of an aggregate: the largest N for which T{x1, ..., xN} compiles with
// values convertible to anything. It stops at the first N that fails (no TrainConfig member is
// itself an aggregate, so brace elision cannot absorb extra values).
struct AnyValue {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): only used unevaluated
};

template <class T, std::size_t... I>
constexpr bool constructible_from(std::index_sequence<I...>) {
  return requires { T{((void)I, AnyValue{})...}; };
}

template <class T, std::size_t N = 0>
constexpr std::size_t member_count() {
  if constexpr (constructible_from<T>(std::make_index_sequence<N + 1>{})) return member_count<T, N + 1>();
  else return N;
}

// Every field set to a value that is not its default.
TrainConfig non_default() {
  TrainConfig c;
  c.parallel = Parallel::pp;
  c.layers = {64, 32, 10};
  c.activation = Activation::Tanh;
  c.loss = LossKind::mse;  // the default's loss in use is cross-entropy (auto on digits)
  c.dataset = "diabetes";
  c.epochs = 5;  // both set: validate() would refuse, the table does not care
  c.steps = 77;
  c.batch = 16;
  c.micro_batch = 4;
  c.lr = 0.125;
  c.optimizer = OptimizerKind::adam;
  c.momentum = 0.5;
  c.weight_decay = 0.01;
  c.seed = 7;
  c.device = Device::CUDA;
  c.deterministic = true;
  c.on_failure = OnFailure::keep_local_batch;
  c.inject = {"kill:rank=1:step=3"};
  c.hang_timeout_s = 5;
  c.checkpoint_dir = "ck2";
  c.checkpoint_every = 3;
  c.keep_checkpoints = 7;
  c.resume = "ck";
  c.init_weights = "w.safetensors";
  c.log_json = "run.jsonl";
  c.metrics_port = 9100;
  c.metrics_bind = "0.0.0.0";
  c.quiet = true;
  c.log_every = 9;
  c.held_out = 0.3;
  c.bucket_mb = 1;
  c.overlap = false;
  c.micro_batches = 2;
  c.replicas = 2;
  c.replicate_every = 5;
  c.verify_every = 7;
  c.verify_at_rest = AtRest::off;
  c.verify_reductions = true;
  c.straggler_factor = 3;
  c.straggler_window = 2;
  c.evict_stragglers = true;
  c.spares = 1;
  c.respawns = 2;
  c.schedule = Schedule::one_f_one_b;
  c.pp_size = 2;
  c.tp_size = 2;
  return c;
}

std::map<std::string, ConfigDifference> by_field(const std::vector<ConfigDifference>& d) {
  std::map<std::string, ConfigDifference> m;
  for (const auto& x : d) m[x.field] = x;
  return m;
}

}  // namespace

TEST(ResumeConfig, TableCoversEveryField) {
  // A TrainConfig field missing from the table would be neither recorded nor compared.
  EXPECT_EQ(TrainConfig{}.to_json().size(), member_count<TrainConfig>())
      << "a TrainConfig field is missing from the table in train/train_config.cpp";
  // non_default() changes every field: each one shows up once in the differences.
  EXPECT_EQ(config_differences(TrainConfig{}, non_default()).size(), member_count<TrainConfig>());
}

TEST(ResumeConfig, JsonRoundTrip) {
  const TrainConfig c = non_default();
  const nlohmann::json j = c.to_json();
  EXPECT_EQ(j.at("batch"), 16);
  EXPECT_EQ(j.at("micro-batch"), 4);
  EXPECT_EQ(j.at("layers"), nlohmann::json::array({64, 32, 10}));
  EXPECT_TRUE(config_differences(TrainConfig::from_json(j), c).empty());
  EXPECT_TRUE(config_differences(TrainConfig::from_json(nlohmann::json::parse(j.dump())), c).empty());
  EXPECT_EQ(TrainConfig::from_json(j).canonical(), c.canonical());
}

TEST(ResumeConfig, AbsentFieldsKeepTheirDefaultsUnknownAreIgnored) {
  const TrainConfig c = TrainConfig::from_json({{"batch", 32}, {"a-field-from-the-future", 1}});
  EXPECT_EQ(c.batch, 32);
  TrainConfig expected;
  expected.batch = 32;
  expected.loss = LossKind::mse;  // a record without a loss was trained with MSE
  EXPECT_TRUE(config_differences(c, expected).empty());
  EXPECT_THROW(TrainConfig::from_json({{"batch", "thirty-two"}}), nlohmann::json::exception);
  // The choices are enums: a record names them as the flags do, and a name no flag takes is refused.
  EXPECT_EQ(TrainConfig::from_json({{"parallel", "tp"}, {"optimizer", "adamw"}}).optimizer, OptimizerKind::adamw);
  EXPECT_EQ(non_default().to_json()["on-failure"], "keep-local-batch");
  try {
    TrainConfig::from_json({{"parallel", "xx"}});
    FAIL() << "an unknown --parallel was accepted";
  } catch (const ftcc::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "--parallel 'xx': expected dp, pp, tp, dp,pp or dp,tp");
  }
}

TEST(ResumeConfig, RefusalNamesEveryUnsafeFieldWithBothValues) {
  TrainConfig saved, now;
  saved.batch = 32;
  saved.seed = 1;
  now.batch = 16;
  now.seed = 7;
  now.lr = 0.1;  // safe: not named
  const std::string why = resume_refusal(saved, now);
  EXPECT_EQ(why, "batch 32 (checkpoint) vs 16 (now), seed 1 vs 7; these must match to resume (fields safe to change: "
                 "lr, epochs, steps, the rank count, parallel, ... see docs/training.md)");
}

TEST(ResumeConfig, LossIsRecordedAsTheLossInUse) {
  TrainConfig digits;  // --loss auto on digits trains with cross-entropy
  EXPECT_EQ(digits.loss_in_use(), LossKind::cross_entropy);
  EXPECT_EQ(digits.to_json().at("loss"), "cross-entropy");
  TrainConfig explicit_ce = digits;
  explicit_ce.loss = LossKind::cross_entropy;
  EXPECT_TRUE(config_differences(digits, explicit_ce).empty());
  TrainConfig diabetes;
  diabetes.dataset = "diabetes";
  EXPECT_EQ(diabetes.loss_in_use(), LossKind::mse);
  // A checkpoint written before --loss existed was trained with MSE: resuming it on digits now
  // (cross-entropy by default) is refused, on diabetes it is the same loss.
  EXPECT_EQ(resume_refusal(TrainConfig::from_json({{"dataset", "digits"}}), digits).rfind("loss mse (checkpoint) vs cross-entropy (now);", 0), 0u)
      << resume_refusal(TrainConfig::from_json({{"dataset", "digits"}}), digits);
  EXPECT_EQ(resume_refusal(TrainConfig::from_json({{"dataset", "diabetes"}}), diabetes), "");
  // Cross-entropy needs class probabilities as targets: a regression set is refused, by flag.
  diabetes.loss = LossKind::cross_entropy;
  try {
    diabetes.validate();
    FAIL() << "--loss cross-entropy on diabetes was accepted";
  } catch (const ftcc::InvalidArgument& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("--loss cross-entropy needs a classification data set"));
    EXPECT_THAT(e.what(), testing::HasSubstr("--dataset 'diabetes' is regression: use --loss mse"));
  }
}

TEST(ResumeConfig, Classification) {
  const TrainConfig base;
  const std::vector<std::string> unsafe = {"layers",  "activation", "loss", "dataset",       "batch",       "micro-batch",
                                           "optimizer", "momentum", "seed",          "deterministic", "on-failure",
                                           "held-out"};
  const std::vector<std::string> safe = {"parallel",       "epochs",   "steps",        "lr",           "weight-decay",
                                         "device",         "inject",   "hang-timeout", "checkpoint-dir",
                                         "checkpoint-every", "keep-checkpoints", "resume", "init-weights", "log-json",     "metrics-port", "metrics-bind",
                                         "quiet",          "log-every", "bucket-mb",   "overlap",      "micro-batches", "replicas",
                                         "replicate-every", "verify-every", "verify-at-rest", "verify-reductions", "straggler-factor", "straggler-window", "evict-stragglers", "spares", "respawn", "schedule", "pp-size", "tp-size"};
  const auto d = by_field(config_differences(base, non_default()));
  ASSERT_EQ(d.size(), unsafe.size() + safe.size());
  for (const auto& f : unsafe) {
    ASSERT_TRUE(d.count(f)) << f;
    // momentum only matters to SGD: non_default() switches to adam, so there it is safe.
    EXPECT_EQ(d.at(f).safe_on_resume, f == "momentum") << f;
  }
  for (const auto& f : safe) {
    ASSERT_TRUE(d.count(f)) << f;
    EXPECT_TRUE(d.at(f).safe_on_resume) << f;
  }
}

TEST(ResumeConfig, SafeChangesAreAccepted) {
  TrainConfig saved;
  saved.checkpoint_dir = "ck";
  saved.checkpoint_every = 10;
  saved.epochs = 3;
  TrainConfig now;
  now.parallel = Parallel::pp;
  now.steps = 60;
  now.lr = 0.01;
  now.resume = "ck";
  now.log_json = "x.jsonl";
  now.quiet = true;
  now.inject = {"kill:rank=2:step=50"};
  now.hang_timeout_s = 2;
  now.bucket_mb = 4;
  now.replicas = 2;
  EXPECT_EQ(resume_refusal(saved, now), "");
}

TEST(ResumeConfig, MomentumMattersOnlyToSgd) {
  TrainConfig saved, now;
  now.momentum = 0.5;
  EXPECT_EQ(resume_refusal(saved, now).rfind("momentum 0.9 (checkpoint) vs 0.5 (now);", 0), 0u);
  saved.optimizer = now.optimizer = OptimizerKind::adam;
  EXPECT_EQ(resume_refusal(saved, now), "");
}

TEST(ResumeConfig, ValuesShownAsOnTheCommandLine) {
  TrainConfig saved, now;
  saved.layers = {64, 64, 10};
  now.layers = {64, 32, 10};
  saved.deterministic = true;
  now.held_out = 0.25;
  const std::string why = resume_refusal(saved, now);
  EXPECT_EQ(why.rfind("layers 64,64,10 (checkpoint) vs 64,32,10 (now), deterministic true vs false, held-out 0.2 vs 0.25; ", 0),
            0u)
      << why;
}

// The store: the configuration is recorded in the metadata and compared on newest_valid.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ftcc-resume-config-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write_checkpoint(const TrainConfig& cfg, std::int64_t step) {
    auto model = ftcc::nn::mlp(widths_, ftcc::nn::Activation::ReLU, cfg.seed);
    ftcc::optim::SGD opt(model->named_parameters(), {.lr = cfg.lr, .momentum = cfg.momentum});
    CheckpointStore store(dir_.string(), cfg, widths_);
    store.save(CheckpointInfo{{.cursor = {0, step}, .step = step, .samples_seen = step * cfg.batch}, 2, cfg.seed, "hash", ""}, *model, opt);
  }
  std::map<std::string, std::string> contents() const {
    std::map<std::string, std::string> m;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::ifstream in(e.path(), std::ios::binary);
      m[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    return m;
  }

  fs::path dir_;
  std::vector<std::int64_t> widths_{4, 8, 2};
};

TEST_F(StoreTest, RecordsTheConfigurationWithResolvedLayers) {
  TrainConfig cfg;  // no --layers: recorded as the model's widths
  write_checkpoint(cfg, 5);
  std::ifstream in(dir_ / "ckpt-0000000005.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("config").at("layers"), nlohmann::json::array({4, 8, 2}));
  EXPECT_EQ(j.at("config").at("batch"), 64);
  EXPECT_EQ(j.at("config_hash"), "hash");
  // Resuming with --layers given explicitly, or omitted, is the same model.
  TrainConfig now = cfg;
  now.layers = {4, 8, 2};
  EXPECT_TRUE(CheckpointStore(dir_.string(), now, widths_).newest_valid().has_value());
  EXPECT_TRUE(CheckpointStore(dir_.string(), cfg, widths_).newest_valid().has_value());
}

TEST_F(StoreTest, RefusesAnotherConfigurationAndChangesNothing) {
  TrainConfig cfg;
  cfg.batch = 32;
  cfg.seed = 1;
  write_checkpoint(cfg, 5);
  write_checkpoint(cfg, 10);
  const auto before = contents();
  TrainConfig now = cfg;
  now.batch = 16;
  now.seed = 7;
  now.lr = 0.5;
  try {
    CheckpointStore(dir_.string(), now, widths_).newest_valid();
    FAIL() << "accepted a checkpoint of another configuration";
  } catch (const ftcc::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("the newest checkpoint (ckpt-0000000010.json) was written with a different "
                                          "configuration: batch 32 (checkpoint) vs 16 (now), seed 1 vs 7; these must "
                                          "match to resume (fields safe to change: ",
                                          0),
              0u)
        << e.what();
  }
  EXPECT_EQ(contents(), before);
  // Safe changes only: accepted, the newest one.
  now = cfg;
  now.lr = 0.5;
  now.steps = 100;
  const auto info = CheckpointStore(dir_.string(), now, widths_).newest_valid();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->step(), 10);
  // A store that knows no configuration (tools, fuzzing) only reads.
  EXPECT_TRUE(CheckpointStore(dir_.string()).newest_valid().has_value());
}

TEST_F(StoreTest, OldCheckpointWithoutConfigurationComparesTheSeedAndSaysSo) {
  TrainConfig cfg;
  cfg.seed = 3;
  write_checkpoint(cfg, 5);
  const fs::path meta = dir_ / "ckpt-0000000005.json";
  nlohmann::json j;
  {
    std::ifstream in(meta);
    j = nlohmann::json::parse(in);
  }
  // As an older ftcc-train wrote it: format 1, no record digest, no configuration.
  j.erase("config");
  j.erase("record_sha256");
  j["format"] = "ftcc-train-checkpoint-1";
  {
    std::ofstream out(meta, std::ios::trunc);
    out << j.dump(1) << "\n";
  }
  TrainConfig now = cfg;
  now.batch = 16;  // not recorded: cannot be checked
  std::vector<std::string> notes;
  const auto info = CheckpointStore(dir_.string(), now, widths_).newest_valid([&](const std::string& n) { notes.push_back(n); });
  ASSERT_TRUE(info.has_value());
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("is of the older format ftcc-train-checkpoint-1"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("records no configuration"), std::string::npos) << notes[1];
  now.seed = 4;
  try {
    CheckpointStore(dir_.string(), now, widths_).newest_valid();
    FAIL() << "accepted an old checkpoint of another seed";
  } catch (const ftcc::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("seed 3 (checkpoint) vs 4 (now)"), std::string::npos) << e.what();
  }
}

TEST_F(StoreTest, SkippedCheckpointsAreNotedAndAMalformedConfigurationIsUnreadable) {
  TrainConfig cfg;
  write_checkpoint(cfg, 5);
  write_checkpoint(cfg, 10);
  const fs::path meta = dir_ / "ckpt-0000000010.json";
  nlohmann::json j;
  {
    std::ifstream in(meta);
    j = nlohmann::json::parse(in);
  }
  j["config"]["batch"] = "sixty-four";
  {
    std::ofstream out(meta, std::ios::trunc);
    out << j.dump(1) << "\n";
  }
  std::vector<std::string> notes;
  const auto info = CheckpointStore(dir_.string(), cfg, widths_).newest_valid([&](const std::string& n) { notes.push_back(n); });
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->step(), 5);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("skipping checkpoint " + meta.string() + ": unreadable metadata", 0), 0u) << notes[0];
}
