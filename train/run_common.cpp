#include "ftcc/train/run_common.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/kept_buffer.hpp"
#include "ftcc/nn/safetensors.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/train/checkpoint_store.hpp"

namespace ftcc::train {
namespace {

namespace fc = ftcc::comm;

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

data::Batch all_of(const data::Dataset& d, Device dev) {
  std::vector<std::int64_t> ids(static_cast<size_t>(d.size()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  return d.gather(ids, dev);
}

// Rank 0's verdict of a start-up step, broadcast: status (1 done, 0 nothing there, -1 error), the
// progress it read (TrainProgress::words), and a message (the file read, or the error). Lives in a
// comm::KeptBuffer, as every buffer of this file's collectives does: a failure that interrupts
// them leaves it alive.
struct Verdict {
  static constexpr std::size_t kHead = 1 + TrainProgress::kWords;
  std::array<std::int64_t, kHead> head{};  // status, then the progress words
  std::array<char, 1024> message{};
  void set_message(const std::string& m) { std::snprintf(message.data(), message.size(), "%s", m.c_str()); }
  void set_progress(const TrainProgress& p) {
    const auto w = p.words();
    std::copy(w.begin(), w.end(), head.begin() + 1);
  }
  TrainProgress progress() const { return TrainProgress::from_words(head.data() + 1); }
  // Every rank gets rank 0's verdict; an error is thrown on every rank alike.
  void share(fc::Communicator& c) {
    fc::broadcast(c, head.data(), head.size(), fc::DType::i64, 0);
    fc::broadcast(c, message.data(), message.size() / 8, fc::DType::i64, 0);
    if (head[0] == -1) throw ftcc::InvalidArgument(std::string(message.data()));
  }
};

}  // namespace

void require_finite(double reduced_loss, bool gradients_finite, std::int64_t step, const TrainConfig& cfg) {
  if (std::isfinite(reduced_loss) && gradients_finite) return;
  const std::string what = !std::isfinite(reduced_loss)
                               ? "non-finite loss (" + number_text(reduced_loss) + ")"
                               : "non-finite gradient (loss " + number_text(reduced_loss) + ")";
  throw ftcc::Error(what + " at step " + std::to_string(step) + ": the training diverged (lower --lr, now " +
                    number_text(cfg.lr) + ") or the data holds NaN/Inf values");
}

void require_samples_exact(const TrainSummary& s) {
  if (s.samples_digest_ok && s.samples_seen == s.samples_expected) return;
  throw ftcc::Error("exactly-once check failed: the committed steps fed " + std::to_string(s.samples_seen) +
                    " samples (digest " + data::digest_hex(s.samples_digest) + "), the batches before the final data cursor (epoch " +
                    std::to_string(s.epochs) + ") hold " + std::to_string(s.samples_expected) + " (digest " +
                    data::digest_hex(s.samples_digest_expected) +
                    "): the progress restored from a checkpoint or a recovery was wrong; the model did not train on "
                    "the configured data");
}

void require_batch_fits(const TrainConfig& cfg, std::int64_t train_rows) {
  FTCC_REQUIRE(cfg.batch <= train_rows)
      << "--batch " << cfg.batch << " is larger than the training set (" << train_rows << " rows of " << cfg.dataset
      << " after --held-out " << number_text(cfg.held_out) << "): use at most " << train_rows;
}

std::function<void()> commit_check(const recovery::ResilientGroup& g, std::int64_t step) {
  return [&g, step] { g.check_current("writing checkpoint " + std::to_string(step)); };
}

void remove_stale_temporaries(const CheckpointStore& store, const recovery::ResilientGroup& g, RunLog& log) {
  if (g.rank() != 0 || g.is_spare() || g.respawned()) return;
  for (const std::string& path : store.remove_stale_temporaries())
    log.note("removed " + path + ": a temporary file left by an interrupted checkpoint write");
}

TrainProgress agree_progress(fc::Communicator& c, const TrainProgress* mine, std::int64_t step) {
  constexpr std::size_t kWords = 1 + TrainProgress::kWords;  // has it, then the progress words
  const fc::KeptBuffer<std::array<std::int64_t, kWords>> row;  // zeros: value-initialized
  if (mine) {
    (*row)[0] = 1;
    const auto w = mine->words();
    std::copy(w.begin(), w.end(), row->begin() + 1);
  }
  const fc::KeptBuffer<std::vector<std::int64_t>> kept_all(kWords * static_cast<std::size_t>(c.size()));
  const std::vector<std::int64_t>& all = *kept_all;
  fc::allgather(c, row->data(), kept_all->data(), kWords, fc::DType::i64);
  int chosen = -1;
  TrainProgress agreed;
  for (int r = 0; r < c.size(); ++r) {
    const std::int64_t* e = &all[kWords * static_cast<std::size_t>(r)];
    if (!e[0]) continue;
    const TrainProgress theirs = TrainProgress::from_words(e + 1);
    if (chosen < 0) {
      chosen = r;
      agreed = theirs;
    } else if (theirs != agreed) {
      throw ftcc::Error("ranks disagree on the training progress at step " + std::to_string(step) + ": rank " +
                        std::to_string(chosen) + " at " + agreed.describe() + ", rank " + std::to_string(r) + " at " +
                        theirs.describe());
    }
  }
  if (chosen < 0) throw ftcc::Error("no survivor recorded the training progress of step " + std::to_string(step));
  FTCC_INVARIANT(agreed.step == step) << "progress recorded for step " << agreed.step << ", rolling back to " << step;
  return agreed;
}

std::vector<int> ranks_differing(fc::Communicator& c, const Digest& mine) {
  const fc::KeptBuffer<std::array<std::int64_t, 4>> words;
  static_assert(sizeof(std::array<std::int64_t, 4>) == sizeof(Digest));
  std::memcpy(words->data(), mine.data(), sizeof(Digest));
  const fc::KeptBuffer<std::vector<std::int64_t>> kept_all(4 * static_cast<size_t>(c.size()));
  const std::vector<std::int64_t>& all = *kept_all;
  fc::allgather(c, words->data(), kept_all->data(), 4, fc::DType::i64);
  std::vector<int> bad;
  for (int r = 1; r < c.size(); ++r) {
    const auto row = all.begin() + 4 * static_cast<std::ptrdiff_t>(r);
    if (!std::equal(row, row + 4, all.begin())) bad.push_back(r);
  }
  return bad;
}

Digest config_digest(const TrainConfig& cfg) {
  const std::string canon = cfg.canonical();
  return sha256_of_bytes(std::as_bytes(std::span<const char>(canon.data(), canon.size())));
}

Digest check_same_config(const TrainConfig& cfg, fc::Communicator& c, const std::vector<int>& members) {
  const Digest h = config_digest(cfg);
  if (auto bad = ranks_differing(c, h); !bad.empty())
    throw ftcc::InvalidArgument("ranks were started with different configurations: rank " +
                                std::to_string(members[static_cast<size_t>(bad[0])]) + " differs from rank " +
                                std::to_string(members[0]) + " (start every rank with the same ftcc-train flags)");
  return h;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const nn::NamedTensors& params) {
  switch (c.optimizer) {
    case OptimizerKind::sgd:
      return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = c.lr, .momentum = c.momentum,
                                                                     .weight_decay = c.weight_decay});
    case OptimizerKind::adamw:
      return std::make_unique<optim::Adam>(params, optim::adamw_options(c.lr, c.weight_decay));
    case OptimizerKind::adam:
      break;
  }
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

tensor::Tensor activate(Activation a, const tensor::Tensor& x) { return tensor::activation(x, as_fused(a)); }

tensor::Activation as_fused(Activation a) {
  switch (a) {
    case Activation::Tanh: return tensor::Activation::tanh;
    case Activation::Sigmoid: return tensor::Activation::sigmoid;
    case Activation::ReLU: break;
  }
  return tensor::Activation::relu;
}

nn::NamedTensors FullModel::state() const {
  nn::NamedTensors l = model->named_parameters();
  for (auto& nt : opt->state_dict()) l.push_back(nt);
  return l;
}

FullModel make_full_model(const TrainConfig& cfg, const std::vector<std::int64_t>& widths) {
  FullModel f;
  f.model = nn::mlp(widths, cfg.activation, cfg.seed);
  f.opt = make_optimizer(cfg, f.model->named_parameters());
  return f;
}

tensor::Tensor batch_loss(LossKind loss, const tensor::Tensor& out, const tensor::Tensor& y, std::int64_t global_rows) {
  FTCC_INVARIANT(loss != LossKind::automatic) << "batch_loss: the loss in use is never automatic";
  FTCC_INVARIANT(out.dim() == 2) << "batch_loss: output " << tensor::shape_str(out.shape()) << " is not [rows, outputs]";
  const auto rows = static_cast<double>(global_rows);
  if (loss == LossKind::cross_entropy) return tensor::cross_entropy_loss(out, y, rows);
  return tensor::mse_loss(out, y, rows * static_cast<double>(out.size(1)));
}

double loss_on(nn::Module& model, const data::Dataset& d, LossKind loss, Device dev) {
  tensor::NoGradGuard no_grad;
  auto b = all_of(d, dev);
  return batch_loss(loss, model(b.x), b.y, d.size()).item();
}

double accuracy_on(nn::Module& model, const data::Dataset& d, Device dev) {
  tensor::NoGradGuard no_grad;
  auto b = all_of(d, dev);
  const auto pred = data::argmax_rows(model(b.x).to(Device::CPU));
  std::int64_t ok = 0;
  for (size_t i = 0; i < pred.size(); ++i) ok += pred[i] == d.labels[i];
  return static_cast<double>(ok) / static_cast<double>(pred.size());
}

namespace {

// What split_figure measures: the training loss in use (mse or cross_entropy) or, with
// `accuracy`, the fraction of correct argmax answers.
struct Figure {
  bool accuracy = false;
  LossKind loss = LossKind::mse;
};

// Per chunk of d owned by rank r of n: the sum of squared errors, of the rows' cross-entropies, or
// (accuracy) the count of correct argmax answers, in `out[chunk]`.
void chunk_sums(nn::Module& model, const data::Dataset& d, Figure fig, int r, int n, Device dev,
                std::vector<double>& out) {
  tensor::NoGradGuard no_grad;
  const std::int64_t N = d.size();
  for (std::int64_t c = r; c * kEvalChunk < N; c += n) {
    const std::int64_t b = c * kEvalChunk, e = std::min(N, b + kEvalChunk);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(e - b));
    for (std::int64_t i = b; i < e; ++i) ids[static_cast<std::size_t>(i - b)] = i;
    const auto batch = d.gather(ids, dev);
    const auto pred = model(batch.x).to(Device::CPU);
    double sum = 0;
    if (fig.accuracy) {
      const auto top = data::argmax_rows(pred);
      for (std::size_t i = 0; i < top.size(); ++i) sum += top[i] == d.labels[static_cast<std::size_t>(b) + i];
    } else if (fig.loss == LossKind::cross_entropy) {
      sum = tensor::cross_entropy_loss(pred, batch.y.to(Device::CPU), 1.0).item();  // the rows' sum
    } else {
      const auto p = pred.to_vector(), y = batch.y.to(Device::CPU).to_vector();
      for (std::size_t i = 0; i < p.size(); ++i) sum += (static_cast<double>(p[i]) - y[i]) * (static_cast<double>(p[i]) - y[i]);
    }
    out[static_cast<std::size_t>(c)] = sum;
  }
}

// The figure of d: mean squared error per element, mean cross-entropy per row, or accuracy.
double split_figure(fc::Communicator& c, nn::Module& model, const data::Dataset& d, Figure fig, Device dev) {
  const std::int64_t chunks = (d.size() + kEvalChunk - 1) / kEvalChunk;
  const fc::KeptBuffer<std::vector<double>> kept_sums(static_cast<std::size_t>(chunks), 0.0);
  std::vector<double>& sums = *kept_sums;
  chunk_sums(model, d, fig, c.rank(), c.size(), dev, sums);
  if (c.size() > 1 && chunks > 0) fc::allreduce(c, fc::kInPlace, sums.data(), sums.size(), fc::DType::f64, fc::ReduceOp::sum);
  double total = 0;
  for (double v : sums) total += v;  // each chunk came from one rank, zeros from the others: exact
  const double per = fig.accuracy || fig.loss == LossKind::cross_entropy ? static_cast<double>(d.size())
                              : static_cast<double>(d.size()) * static_cast<double>(d.num_targets());
  return per > 0 ? total / per : 0.0;
}

}  // namespace

EvalFigures evaluate_split(fc::Communicator& c, nn::Module& model, const data::Dataset& train,
                           const data::Dataset& test, bool classification, LossKind loss, Device dev) {
  EvalFigures f;
  f.train_loss = split_figure(c, model, train, {.accuracy = false, .loss = loss}, dev);
  f.eval = split_figure(c, model, test, {.accuracy = classification, .loss = LossKind::mse}, dev);
  return f;
}

FinalMetrics final_metrics(fc::Communicator& c, nn::Module* model, const data::Dataset& train,
                           const data::Dataset& test, bool classification, LossKind loss, Device dev) {
  const fc::KeptBuffer<std::array<double, 2>> kept_result;
  const fc::KeptBuffer<std::array<std::int64_t, 4>> kept_digest;
  double* result = kept_result->data();
  std::int64_t* digest_words = kept_digest->data();
  constexpr std::size_t digest_bytes = 4 * sizeof(std::int64_t);
  static_assert(digest_bytes == sizeof(Digest));
  if (c.rank() == 0) {
    FTCC_INVARIANT(model != nullptr) << "final_metrics: rank 0 holds no model";
    result[0] = loss_on(*model, train, loss, dev);
    result[1] = classification ? accuracy_on(*model, test, dev) : loss_on(*model, test, LossKind::mse, dev);
    const Digest d = sha256_of(model->named_parameters());
    std::memcpy(digest_words, d.data(), digest_bytes);
  }
  fc::broadcast(c, result, 2, fc::DType::f64, 0);
  fc::broadcast(c, digest_words, 4, fc::DType::i64, 0);
  FinalMetrics m;
  m.train_loss = result[0];
  m.eval = result[1];
  std::memcpy(m.digest.data(), digest_words, digest_bytes);
  return m;
}

std::optional<StartPoint> load_checkpoint_on_rank0(fc::Communicator& c, const std::string& dir, const char* flag,
                                                   const TrainConfig& cfg, const std::vector<std::int64_t>& widths,
                                                   RunLog& log, nn::Module* model, optim::Optimizer* opt) {
  const fc::KeptBuffer<Verdict> kept;
  Verdict& v = *kept;
  if (c.rank() == 0) {
    try {
      std::error_code ec;
      FTCC_REQUIRE(std::filesystem::is_directory(dir, ec))
          << "no such folder (" << (ec ? ec.message() : "it does not exist or is not a folder")
          << "); give the --checkpoint-dir of the run to continue";
      CheckpointStore from(dir, cfg, widths);  // refuses a checkpoint of another configuration
      if (auto info = from.newest_valid([&](const std::string& note) { log.note(note); })) {
        FTCC_INVARIANT(model && opt) << "load_checkpoint_on_rank0: rank 0 has no model to load into";
        CheckpointStore::load(*info, *model, *opt);  // validates everything before changing anything
        v.head[0] = 1;
        v.set_progress(info->progress);
        v.set_message(info->path);
      }
    } catch (const std::exception& e) {
      v.head[0] = -1;
      v.set_message(std::string(flag) + " '" + dir + "': " + e.what());
    }
  }
  v.share(c);
  if (v.head[0] == 0) return std::nullopt;
  return StartPoint{v.progress(), std::string(v.message.data())};
}

void load_init_weights_on_rank0(fc::Communicator& c, const TrainConfig& cfg, nn::Module* model) {
  const fc::KeptBuffer<Verdict> kept;
  Verdict& v = *kept;
  if (c.rank() == 0) {
    try {
      const auto file = nn::load_safetensors(cfg.init_weights);
      FTCC_INVARIANT(model) << "load_init_weights_on_rank0: rank 0 has no model to load into";
      const nn::NamedTensors params = model->named_parameters();
      for (const auto& [name, t] : params)
        FTCC_REQUIRE(file.find(name) != nullptr)
            << "no tensor '" << name << "' (the model of --layers names its parameters 0.weight, 0.bias, 2.weight, ...)";
      nn::load_into(file, params, cfg.init_weights, /*strict=*/false);  // checks shapes and dtypes first
      v.head[0] = 1;
    } catch (const std::exception& e) {
      v.head[0] = -1;
      v.set_message("--init-weights '" + cfg.init_weights + "': " + e.what());
    }
  }
  v.share(c);
}

TrainSummary TrainSummary::of_run(LossKind loss, double final_loss, double last_step_loss, bool classification,
                                  double eval_metric,
                                  std::int64_t steps, std::int64_t epochs, int world_size_initial,
                                  const recovery::ResilientGroup& group, const data::SampleTally& seen,
                                  const data::SampleTally& expected, std::string param_sha256,
                                  std::chrono::steady_clock::time_point start) {
  TrainSummary s;
  s.loss_name = choice_name(loss);
  s.final_loss = final_loss;
  s.last_step_loss = last_step_loss;
  s.eval_name = classification ? "accuracy" : "mse";
  s.eval_metric = eval_metric;
  s.steps = steps;
  s.epochs = epochs;
  s.world_size_initial = world_size_initial;
  s.world_size_final = group.size();
  s.samples_seen = seen.count;
  s.samples_expected = expected.count;
  s.samples_digest = seen.digest;
  s.samples_digest_expected = expected.digest;
  s.samples_digest_ok = seen.digest == expected.digest;
  s.recoveries = group.events();
  s.param_sha256 = std::move(param_sha256);
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.samples_per_s = s.wall_s > 0 ? static_cast<double>(s.samples_seen) / s.wall_s : 0;
  return s;
}

nlohmann::json TrainSummary::to_json() const {
  nlohmann::json rec = nlohmann::json::array();
  for (const auto& e : recoveries) rec.push_back(e.to_json());
  nlohmann::json j = {{"loss", loss_name},
          {"final_loss", final_loss},
          {"last_step_loss", last_step_loss},
          {"eval_metric", eval_metric},
          {"eval_name", eval_name},
          {"steps", steps},
          {"epochs", epochs},
          {"world_size_initial", world_size_initial},
          {"world_size_final", world_size_final},
          {"samples_seen", samples_seen},
          {"samples_expected", samples_expected},
          {"samples_digest", data::digest_hex(samples_digest)},
          {"samples_digest_expected", data::digest_hex(samples_digest_expected)},
          {"samples_digest_ok", samples_digest_ok},
          {"recoveries", rec},
          {"param_sha256", param_sha256},
          {"samples_per_s", samples_per_s},
          {"step_samples_per_s", step_samples_per_s},
          {"step_ms", step_ms},
          {"wall_split_s", wall_split_s},
          {"wall_s", wall_s}};
  j["peak_tensor_bytes"] = peak_tensor_bytes;
  j["grid"] = grid;
  j["device"] = device;
  return j;
}

}  // namespace ftcc::train
