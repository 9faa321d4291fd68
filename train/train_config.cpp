#include "ftcc/train/train_config.hpp"

#include <arpa/inet.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <utility>

#include "ftcc/base/error.hpp"
#include "ftcc/recovery/fault_spec.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {
namespace {
bool is_ip_address(const std::string& s) {
  in6_addr buf{};
  return inet_pton(AF_INET, s.c_str(), &buf) == 1 || inet_pton(AF_INET6, s.c_str(), &buf) == 1;
}

// One row of the field table: every TrainConfig field, its name (the flag without "--"), and
// whether a --resume may change it. Unsafe: the field changes the model, the data (which samples,
// in which order), what the checkpoint's data cursor counts, or what the optimizer state means,
// so training on from the checkpoint would not be the run it continues (and exactly-once data
// would be void). Safe: the step budget, the step size, where and how the run is executed,
// observed and checkpointed.
struct Field {
  const char* name;
  bool safe_on_resume;
  // Unsafe fields that only matter in some configurations (momentum: SGD only) say when; a
  // difference where it does not matter (in the resuming run) is safe.
  std::function<bool(const TrainConfig&)> matters;
  std::function<nlohmann::json(const TrainConfig&)> get;
  std::function<void(TrainConfig&, const nlohmann::json&)> set;
};

template <class T>
Field field(const char* name, T TrainConfig::*member, bool safe, std::function<bool(const TrainConfig&)> matters = {}) {
  return {name, safe, std::move(matters), [member](const TrainConfig& c) { return nlohmann::json(c.*member); },
          [member](TrainConfig& c, const nlohmann::json& j) { c.*member = j.get<T>(); }};
}

// An enum field is kept as its name (checkpoints written before the enums read the same).
template <class E>
Field choice_field(const char* name, E TrainConfig::*member, bool safe,
                   std::function<bool(const TrainConfig&)> matters = {}) {
  return {name, safe, std::move(matters),
          [member](const TrainConfig& c) { return nlohmann::json(choice_name(c.*member)); },
          [member, name](TrainConfig& c, const nlohmann::json& j) {
            c.*member = parse_choice<E>(std::string("--") + name, j.get<std::string>());
          }};
}

constexpr bool kSafe = true, kUnsafe = false;

// A new TrainConfig field goes here (tests/train/resume_config_test.cpp checks that none is missing).
const std::vector<Field>& fields() {
  static const std::vector<Field> table{
      choice_field("parallel", &TrainConfig::parallel, kSafe),  // dp, pp and tp checkpoints are one format: the full model
      field("layers", &TrainConfig::layers, kUnsafe),
      choice_field("activation", &TrainConfig::activation, kUnsafe),
      // Kept as the loss in use (auto resolved), so that auto and the loss it stands for compare equal.
      {"loss", kUnsafe, {}, [](const TrainConfig& c) { return nlohmann::json(choice_name(c.loss_in_use())); },
       [](TrainConfig& c, const nlohmann::json& j) { c.loss = parse_choice<LossKind>("--loss", j.get<std::string>()); }},
      field("dataset", &TrainConfig::dataset, kUnsafe),
      field("epochs", &TrainConfig::epochs, kSafe),
      field("steps", &TrainConfig::steps, kSafe),
      field("batch", &TrainConfig::batch, kUnsafe),              // the cursor counts batches of this size
      field("micro-batch", &TrainConfig::micro_batch, kUnsafe),  // the split and the --deterministic sum
      field("lr", &TrainConfig::lr, kSafe),
      choice_field("optimizer", &TrainConfig::optimizer, kUnsafe),      // which state tensors exist
      field("momentum", &TrainConfig::momentum, kUnsafe,         // SGD's momentum buffer (absent at 0)
            [](const TrainConfig& c) { return c.optimizer == OptimizerKind::sgd; }),
      field("weight-decay", &TrainConfig::weight_decay, kSafe),  // applied per step, no state of its own
      field("seed", &TrainConfig::seed, kUnsafe),                // the data order and the held-out split
      choice_field("device", &TrainConfig::device, kSafe),
      field("deterministic", &TrainConfig::deterministic, kUnsafe),  // resumed = uninterrupted, bitwise
      choice_field("on-failure", &TrainConfig::on_failure, kUnsafe),    // keep-local-batch changes the global batch
      field("inject", &TrainConfig::inject, kSafe),
      field("hang-timeout", &TrainConfig::hang_timeout_s, kSafe),
      field("checkpoint-dir", &TrainConfig::checkpoint_dir, kSafe),
      field("checkpoint-every", &TrainConfig::checkpoint_every, kSafe),
      field("keep-checkpoints", &TrainConfig::keep_checkpoints, kSafe),  // how many old files stay on disk
      field("resume", &TrainConfig::resume, kSafe),
      field("init-weights", &TrainConfig::init_weights, kSafe),  // only where a run starts; a resume replaces it
      field("log-json", &TrainConfig::log_json, kSafe),
      field("metrics-port", &TrainConfig::metrics_port, kSafe),
      field("metrics-bind", &TrainConfig::metrics_bind, kSafe),
      field("quiet", &TrainConfig::quiet, kSafe),
      field("log-every", &TrainConfig::log_every, kSafe),
      field("held-out", &TrainConfig::held_out, kUnsafe),        // which samples are training samples
      field("bucket-mb", &TrainConfig::bucket_mb, kSafe),
      field("overlap", &TrainConfig::overlap, kSafe),  // when the same sums are made, not which
      field("micro-batches", &TrainConfig::micro_batches, kSafe),  // pp's pipeline depth: same batch, same data
      choice_field("schedule", &TrainConfig::schedule, kSafe),      // the same parameters, bit for bit
      field("pp-size", &TrainConfig::pp_size, kSafe),               // how the ranks are laid out, not what is computed
      field("tp-size", &TrainConfig::tp_size, kSafe),
      field("replicas", &TrainConfig::replicas, kSafe),            // in-memory copies only
      field("replicate-every", &TrainConfig::replicate_every, kSafe),
      field("verify-every", &TrainConfig::verify_every, kSafe),  // when replicas are compared, not what they compute
      choice_field("verify-at-rest", &TrainConfig::verify_at_rest, kSafe),
      field("verify-reductions", &TrainConfig::verify_reductions, kSafe),  // checks the sums, changes none
      field("straggler-factor", &TrainConfig::straggler_factor, kSafe),
      field("straggler-window", &TrainConfig::straggler_window, kSafe),
      field("evict-stragglers", &TrainConfig::evict_stragglers, kSafe),
      field("spares", &TrainConfig::spares, kSafe),  // which processes train, not what they compute
      field("respawn", &TrainConfig::respawns, kSafe),
  };
  return table;
}

// A value as one would write it on the command line: 64,64,10; relu; 0.05; true.
std::string shown(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) {
      if (!out.empty()) out += ',';
      out += shown(e);
    }
    return out.empty() ? "(none)" : out;
  }
  return v.dump();
}

}  // namespace

void refuse_choice(std::string_view flag, std::string_view text, const std::string& expected) {
  throw ftcc::InvalidArgument(std::string(flag) + " '" + std::string(text) + "': expected " + expected);
}

void TrainConfig::validate() const {
  FTCC_REQUIRE(resume.empty() || init_weights.empty())
      << "--init-weights and --resume exclude each other: a checkpoint holds the weights and the optimizer state";
  // 0 is "not given" here (ftcc-train refuses an explicit 0); the bounds keep epochs x steps per
  // epoch and the sample counts far from overflowing.
  FTCC_REQUIRE(epochs >= 0 && epochs <= kMaxEpochs) << "--epochs must be in [1, " << kMaxEpochs << "], got " << epochs;
  FTCC_REQUIRE(steps >= 0 && steps <= kMaxSteps) << "--steps must be in [1, " << kMaxSteps << "], got " << steps;
  FTCC_REQUIRE(!(epochs > 0 && steps > 0)) << "give --epochs or --steps, not both";
  FTCC_REQUIRE(batch > 0 && batch <= kMaxBatch) << "--batch must be in [1, " << kMaxBatch << "], got " << batch;
  FTCC_REQUIRE(micro_batch > 0 && micro_batch <= kMaxBatch)
      << "--micro-batch must be in [1, " << kMaxBatch << "], got " << micro_batch;
  FTCC_REQUIRE(lr > 0) << "--lr must be > 0, got " << lr;
  FTCC_REQUIRE(momentum >= 0 && momentum < 1) << "--momentum must be in [0, 1), got " << momentum;
  FTCC_REQUIRE(weight_decay >= 0) << "--weight-decay must be >= 0";
  // Non-finite values pass the range checks below (inf > 0) and then overflow the conversions
  // to milliseconds and bytes (undefined behaviour); found by fuzz/train_config_fuzz.cpp.
  for (const auto& [flag, v] : {std::pair<const char*, double>{"--lr", lr}, {"--momentum", momentum},
                                {"--weight-decay", weight_decay}, {"--hang-timeout", hang_timeout_s},
                                {"--held-out", held_out}, {"--bucket-mb", bucket_mb}})
    FTCC_REQUIRE(std::isfinite(v)) << flag << " must be a finite number, got " << v;
  FTCC_REQUIRE(hang_timeout_s >= 0 && hang_timeout_s <= 1e6) << "--hang-timeout must be in [0, 1e6] seconds";
  FTCC_REQUIRE(checkpoint_every >= 0) << "--checkpoint-every must be >= 0, got " << checkpoint_every;
  FTCC_REQUIRE(keep_checkpoints >= 0) << "--keep-checkpoints must be >= 0 (0 keeps all), got " << keep_checkpoints;
  FTCC_REQUIRE(log_every >= 0) << "--log-every must be >= 0, got " << log_every;
  FTCC_REQUIRE(checkpoint_every == 0 || !checkpoint_dir.empty()) << "--checkpoint-every needs --checkpoint-dir";
  FTCC_REQUIRE(held_out > 0 && held_out < 1) << "--held-out must be in (0, 1), got " << held_out;
  FTCC_REQUIRE(bucket_mb > 0 && bucket_mb <= 1e6) << "--bucket-mb must be in (0, 1e6]";
  FTCC_REQUIRE(metrics_port < 65536) << "--metrics-port must be < 65536";
  // Checked on every rank, though only rank 0 serves: a refusal on rank 0 alone, after the others
  // had started training, reached them as a failure in their step (a recovery logged for a job
  // that never ran).
  FTCC_REQUIRE(metrics_port < 0 || is_ip_address(metrics_bind))
      << "--metrics-bind '" << metrics_bind << "' is not an IP address (e.g. 127.0.0.1, 0.0.0.0 or ::1)";
  FTCC_REQUIRE(micro_batches > 0) << "--micro-batches must be > 0";
  FTCC_REQUIRE(pp_size >= 0 && tp_size >= 0) << "--pp-size and --tp-size must be >= 1";
  FTCC_REQUIRE(parallel != Parallel::dp_pp || pp_size >= 1)
      << "--parallel dp,pp needs --pp-size N: the ranks of each pipeline (dp takes the rest: ranks / N replicas)";
  FTCC_REQUIRE(parallel != Parallel::dp_tp || tp_size >= 1)
      << "--parallel dp,tp needs --tp-size N: the ranks of each tensor-parallel group (dp takes the rest)";
  FTCC_REQUIRE(pp_size == 0 || parallel == Parallel::dp_pp)
      << "--pp-size is for --parallel dp,pp (--parallel " << choice_name(parallel) << " uses all the ranks)";
  FTCC_REQUIRE(tp_size == 0 || parallel == Parallel::dp_tp)
      << "--tp-size is for --parallel dp,tp (--parallel " << choice_name(parallel) << " uses all the ranks)";
  FTCC_REQUIRE(schedule == Schedule::gpipe || pipeline())
      << "--schedule 1f1b is a pipeline schedule: for --parallel pp or dp,pp, not " << choice_name(parallel);
  FTCC_REQUIRE(replicas >= 0 && replicate_every > 0) << "--replicas >= 0 and --replicate-every > 0";
  FTCC_REQUIRE(verify_every >= 0) << "--verify-every must be >= 0 (0 turns replica verification off), got " << verify_every;
  FTCC_REQUIRE(straggler_factor > 1 && straggler_factor <= 1000)
      << "--straggler-factor must be a number above 1 and at most 1000, got " << straggler_factor;
  FTCC_REQUIRE(straggler_window >= 1 && straggler_window <= 1000000)
      << "--straggler-window must be in [1, 1000000] checks, got " << straggler_window;
  FTCC_REQUIRE(!verify_reductions || (parallel != Parallel::pp && parallel != Parallel::tp))
      << "--verify-reductions checks the replicas' gradient sum (--parallel dp, dp,pp or dp,tp); --parallel "
      << choice_name(parallel) << " has one replica and no such sum (use --replicas and --verify-at-rest)";
  FTCC_REQUIRE(!verify_reductions || device == Device::CPU)
      << "--verify-reductions: only --device cpu in this version (the checksums are taken on host memory)";
  // What the model-parallel strategies do not support, refused here, before any rank forms its group
  // (refused inside the driver, a rank still finishing the group's start-up saw the others' revoke
  // as a failure, and a hot spare's leaving crashed Open MPI under MPI_Comm_split).
  if (parallel != Parallel::dp) {
    const char* mode = choice_name(parallel);
    // --deterministic is accepted in every mode: each of the global batch's --micro-batches is
    // computed whole on one replica, gradients are summed in micro-batch order (pp) or exactly
    // over the replicas (dp,pp, dp,tp; train/training_driver.cpp), and tp sums over the hidden features
    // exactly (train/tp_exact_pair.hpp).
    FTCC_REQUIRE(on_failure == OnFailure::keep_global_batch) << "--parallel " << mode << ": only --on-failure keep-global-batch";
  }
  FTCC_REQUIRE(spares >= 0) << "--spares must be >= 0, got " << spares;
  FTCC_REQUIRE(respawns >= 0 && respawns <= 1024) << "--respawn must be in [0, 1024], got " << respawns;
  if (!layers.empty()) {
    FTCC_REQUIRE(layers.size() >= 2) << "--layers needs at least two widths (input,output), got " << layers.size();
    for (auto w : layers) FTCC_REQUIRE(w > 0) << "--layers widths must be > 0, got " << w;
  }
  recovery::parse_fault_specs(inject);  // throws with the grammar
  FTCC_REQUIRE(loss != LossKind::cross_entropy || is_classification_dataset(dataset))
      << "--loss cross-entropy needs a classification data set (targets that are class probabilities, such as "
         "digits' one-hot rows); --dataset '"
      << dataset << "' is regression: use --loss mse (or auto, which picks it)";
}

LossKind TrainConfig::loss_in_use() const {
  if (loss != LossKind::automatic) return loss;
  return is_classification_dataset(dataset) ? LossKind::cross_entropy : LossKind::mse;
}

std::string TrainConfig::canonical() const {
  std::ostringstream os;
  os.precision(17);
  os << "parallel=" << choice_name(parallel) << " layers=";
  for (auto w : layers) os << w << ',';
  os << " activation=" << choice_name(activation) << " loss=" << choice_name(loss_in_use()) << " dataset=" << dataset << " epochs=" << epochs << " steps=" << steps
     << " batch=" << batch << " micro_batch=" << micro_batch << " lr=" << lr << " optimizer=" << choice_name(optimizer)
     << " momentum=" << momentum << " weight_decay=" << weight_decay << " seed=" << seed << " device=" << choice_name(device)
     << " deterministic=" << deterministic << " on_failure=" << choice_name(on_failure) << " hang_timeout=" << hang_timeout_s
     << " checkpoint_every=" << checkpoint_every << " keep_checkpoints=" << keep_checkpoints << " resume=" << resume << " init_weights=" << init_weights << " held_out=" << held_out
     << " bucket_mb=" << bucket_mb << " overlap=" << overlap << " micro_batches=" << micro_batches
     << " schedule=" << choice_name(schedule) << " pp_size=" << pp_size << " tp_size=" << tp_size << " replicas=" << replicas
     << " replicate_every=" << replicate_every << " verify_every=" << verify_every << " verify_at_rest=" << choice_name(verify_at_rest) << " verify_reductions=" << verify_reductions << " straggler_factor=" << straggler_factor
     << " straggler_window=" << straggler_window << " evict_stragglers=" << evict_stragglers << " spares=" << spares << " respawn=" << respawns << " inject=";
  for (const auto& s : inject) os << s << ';';
  return os.str();
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields()) j[f.name] = f.get(*this);
  return j;
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  TrainConfig c;
  if (!j.contains("loss")) c.loss = LossKind::mse;
  for (const auto& f : fields())
    if (auto it = j.find(f.name); it != j.end()) f.set(c, *it);
  return c;
}

std::vector<ConfigDifference> config_differences(const TrainConfig& before, const TrainConfig& after) {
  std::vector<ConfigDifference> out;
  for (const auto& f : fields()) {
    const nlohmann::json a = f.get(before), b = f.get(after);
    if (a == b) continue;
    out.push_back({f.name, shown(a), shown(b), f.safe_on_resume || (f.matters && !f.matters(after))});
  }
  return out;
}

std::string resume_refusal(const TrainConfig& saved, const TrainConfig& now) {
  std::string out;
  for (const auto& d : config_differences(saved, now)) {
    if (d.safe_on_resume) continue;
    out += out.empty() ? d.field + " " + d.before + " (checkpoint) vs " + d.after + " (now)"
                       : ", " + d.field + " " + d.before + " vs " + d.after;
  }
  if (out.empty()) return out;
  // Short: the whole line must fit the 2047 bytes a job-level error carries to every rank
  // (kMessageBytes, recovery/group_internals.hpp); docs/training.md lists every field.
  return out + "; these must match to resume (fields safe to change: lr, epochs, steps, the rank count, parallel, ... "
               "see docs/training.md)";
}

}  // namespace ftcc::train
