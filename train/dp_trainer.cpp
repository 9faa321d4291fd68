#include "ftcc/train/dp_trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc_config.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/storage.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/progress_reporter.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/state_hash.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fc = ftcc::comm;

nn::Activation activation_of(const std::string& a) {
  if (a == "tanh") return nn::Activation::Tanh;
  if (a == "sigmoid") return nn::Activation::Sigmoid;
  return nn::Activation::ReLU;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const nn::NamedTensors& params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = c.lr, .momentum = c.momentum,
                                                                   .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw") return std::make_unique<optim::Adam>(params, optim::adamw_options(c.lr, c.weight_decay));
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

// All ranks compare a 256-bit value; returns the ranks whose value differs from rank 0's.
std::vector<int> ranks_differing(fc::Communicator& comm, const Digest& mine) {
  std::int64_t words[4];
  std::memcpy(words, mine.data(), sizeof words);
  std::vector<std::int64_t> all(4 * static_cast<size_t>(comm.size()));
  fc::allgather(comm, words, all.data(), 4, fc::DType::i64);
  std::vector<int> bad;
  for (int r = 1; r < comm.size(); ++r) {
    const auto row = all.begin() + 4 * static_cast<std::ptrdiff_t>(r);
    if (!std::equal(row, row + 4, all.begin())) bad.push_back(r);
  }
  return bad;
}

// The training state that must be identical on every rank (train/dp_trainer.hpp).
using Progress = TrainProgress;

// Progress (with the samples digest accumulated so far), parameters and optimizer state from root.
void broadcast_state(fc::Communicator& comm, int root, nn::Module& model, optim::Optimizer& opt, Progress& p) {
  std::int64_t head[5] = {p.cursor.epoch, p.cursor.step, p.step, p.samples_seen,
                          std::bit_cast<std::int64_t>(p.samples_digest)};
  fc::broadcast(comm, head, 5, fc::DType::i64, root);
  p = Progress{{head[0], head[1]}, head[2], head[3], std::bit_cast<std::uint64_t>(head[4])};
  auto send_list = [&](const nn::NamedTensors& list) {
    auto bytes = nn::pack_bytes(list);
    FTCC_CHECK(bytes.size() % 4 == 0) << "state bytes not a multiple of 4";
    fc::broadcast(comm, bytes.data(), bytes.size() / 4, fc::DType::i32, root);
    if (comm.rank() != root) nn::unpack_bytes(list, bytes);
  };
  send_list(model.named_parameters());
  send_list(opt.state_dict());
}

double mse_on(nn::Module& model, const data::Dataset& d, tensor::Device dev) {
  tensor::NoGradGuard no_grad;
  std::vector<std::int64_t> ids(static_cast<size_t>(d.size()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  auto b = d.gather(ids, dev);
  return tensor::mse_loss(model(b.x), b.y).item();
}

double accuracy_on(nn::Module& model, const data::Dataset& d, tensor::Device dev) {
  tensor::NoGradGuard no_grad;
  std::vector<std::int64_t> ids(static_cast<size_t>(d.size()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  auto b = d.gather(ids, dev);
  const auto pred = data::argmax_rows(model(b.x).to(tensor::Device::CPU));
  std::int64_t ok = 0;
  for (size_t i = 0; i < pred.size(); ++i) ok += pred[i] == d.labels[i];
  return static_cast<double>(ok) / static_cast<double>(pred.size());
}

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

void require_finite(double reduced_loss, bool gradients_finite, std::int64_t step, const TrainConfig& cfg) {
  if (std::isfinite(reduced_loss) && gradients_finite) return;
  const std::string what = !std::isfinite(reduced_loss)
                               ? "non-finite loss (" + number_text(reduced_loss) + ")"
                               : "non-finite gradient (loss " + number_text(reduced_loss) + ")";
  throw ftcc::Error(what + " at step " + std::to_string(step) + ": the training diverged (lower --lr, now " +
                    number_text(cfg.lr) + ") or the data holds NaN/Inf values");
}

TrainProgress agree_progress(fc::Communicator& c, const TrainProgress* mine, std::int64_t step) {
  constexpr std::size_t kWords = 6;
  std::int64_t row[kWords] = {0, 0, 0, 0, 0, 0};  // has it, cursor epoch and step, step, samples, digest
  if (mine) {
    const std::int64_t mine_row[kWords] = {1, mine->cursor.epoch, mine->cursor.step, mine->step, mine->samples_seen,
                                           std::bit_cast<std::int64_t>(mine->samples_digest)};
    std::copy(mine_row, mine_row + kWords, row);
  }
  std::vector<std::int64_t> all(kWords * static_cast<std::size_t>(c.size()));
  fc::allgather(c, row, all.data(), kWords, fc::DType::i64);
  const std::int64_t* chosen = nullptr;
  for (int r = 0; r < c.size(); ++r) {
    const std::int64_t* e = &all[kWords * static_cast<std::size_t>(r)];
    if (!e[0]) continue;
    if (!chosen) chosen = e;
    else if (!std::equal(e, e + kWords, chosen))
      throw ftcc::Error("ranks disagree on the training progress at step " + std::to_string(step) + ": rank " +
                        std::to_string((chosen - all.data()) / static_cast<std::ptrdiff_t>(kWords)) + " at step " +
                        std::to_string(chosen[3]) + " with " + std::to_string(chosen[4]) + " samples seen (digest " +
                        data::digest_hex(std::bit_cast<std::uint64_t>(chosen[5])) + "), rank " + std::to_string(r) +
                        " at step " + std::to_string(e[3]) + " with " + std::to_string(e[4]) + " (digest " +
                        data::digest_hex(std::bit_cast<std::uint64_t>(e[5])) + ")");
  }
  if (!chosen) throw ftcc::Error("no survivor recorded the training progress of step " + std::to_string(step));
  FTCC_CHECK(chosen[3] == step) << "progress recorded for step " << chosen[3] << ", rolling back to " << step;
  return TrainProgress{{chosen[1], chosen[2]}, chosen[3], chosen[4], std::bit_cast<std::uint64_t>(chosen[5])};
}

TrainSummary TrainSummary::of_run(double final_loss, double last_step_loss, bool classification, double eval_metric,
                                  std::int64_t steps, std::int64_t epochs, int world_size_initial,
                                  const recovery::ResilientGroup& group, const data::SampleTally& seen,
                                  const data::SampleTally& expected, std::string param_sha256,
                                  std::chrono::steady_clock::time_point start) {
  TrainSummary s;
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
  return {{"final_loss", final_loss},
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
          {"wall_s", wall_s}};
}

TrainSummary train_data_parallel(const TrainConfig& cfg, recovery::ResilientGroup& g) {
  cfg.validate();
  FTCC_CHECK(cfg.parallel == "dp") << "train_data_parallel called with --parallel " << cfg.parallel;
  const auto t_start = Clock::now();
  const tensor::Device dev = cfg.device == "cuda" ? tensor::Device::CUDA : tensor::Device::CPU;
  FTCC_REQUIRE(dev == tensor::Device::CPU || tensor::cuda_available())
      << "--device cuda: no usable CUDA device here (this build "
      << (FTCC_HAVE_CUDA ? "has CUDA kernels, but no GPU or driver was found" : "was built without CUDA")
      << "); use --device cpu";

  // Ranks started with different configurations would train different models: refuse.
  const std::string canon = cfg.canonical();
  const Digest cfg_hash = sha256_of_bytes(std::as_bytes(std::span<const char>(canon.data(), canon.size())));
  if (auto bad = ranks_differing(g.comm(), cfg_hash); !bad.empty())
    throw ftcc::InvalidArgument("ranks were started with different configurations: rank " +
                                std::to_string(g.members()[static_cast<size_t>(bad[0])]) +
                                " differs from rank " + std::to_string(g.members()[0]) +
                                " (start every rank with the same ftcc-train flags)");

  TrainingData td = load_training_data(cfg.dataset, cfg.seed, cfg.held_out);
  const std::vector<std::int64_t> widths = model_widths(cfg.layers, td, cfg.dataset);

  auto model = nn::mlp(widths, activation_of(cfg.activation), cfg.seed);
  if (dev == tensor::Device::CUDA) model->to(dev);
  const nn::NamedTensors params = model->named_parameters();
  auto opt = make_optimizer(cfg, params);
  GradientReducer reducer(nn::gradients_of(params), static_cast<std::size_t>(cfg.bucket_mb * 1024 * 1024));

  const int n0 = g.initial_size();
  std::int64_t global_batch = cfg.batch;
  auto make_sampler = [&](std::int64_t b) {
    return std::make_unique<data::DistributedSampler>(
        data::SamplerOptions{.num_samples = td.train.size(), .global_batch = b, .seed = cfg.seed,
                             .micro_batch = std::min(cfg.micro_batch, b)});
  };
  auto sampler = make_sampler(global_batch);
  Progress p;

  RunLog log(cfg, g, sampler->steps_per_epoch());
  std::unique_ptr<CheckpointStore> store;
  if (!cfg.checkpoint_dir.empty()) store = std::make_unique<CheckpointStore>(cfg.checkpoint_dir, cfg, widths);

  // Resume: rank 0 finds the newest valid checkpoint and loads it; everyone gets it by broadcast.
  // Rank 0's verdict (found / none / error and its message) is broadcast first, so a checkpoint
  // that does not fit fails every rank with the same message instead of stranding the others.
  if (!cfg.resume.empty()) {
    std::int64_t status = 0;  // 1 loaded, 0 none found, -1 error
    std::array<char, 1024> message{};
    if (g.rank() == 0) {
      try {
        CheckpointStore from(cfg.resume, cfg, widths);  // refuses a checkpoint of another configuration
        auto info = from.newest_valid([&](const std::string& note) { log.note(note); });
        if (info) {
          CheckpointStore::load(*info, *model, *opt);  // validates everything before changing anything
          p = Progress{{info->epoch, info->cursor_step}, info->step, info->samples_seen};
          p.samples_digest = info->samples_digest;
          log.note("resumed from " + info->path + " (step " + std::to_string(info->step) + ")");
          status = 1;
        }
      } catch (const std::exception& e) {
        status = -1;
        std::snprintf(message.data(), message.size(), "--resume '%s': %s", cfg.resume.c_str(), e.what());
      }
    }
    fc::broadcast(g.comm(), &status, 1, fc::DType::i64, 0);
    if (status == -1) {
      fc::broadcast(g.comm(), message.data(), message.size() / 8, fc::DType::i64, 0);
      throw ftcc::InvalidArgument(std::string(message.data()));
    }
    FTCC_REQUIRE(status == 1) << "--resume '" << cfg.resume << "': no valid checkpoint found there";
    broadcast_state(g.comm(), 0, *model, *opt, p);
  }
  if (auto bad = ranks_differing(g.comm(), sha256_of(params)); !bad.empty())
    throw ftcc::Error("initial parameters differ between ranks (rank " + std::to_string(bad[0]) + ")");
  g.set_committed_step(p.step - 1);

  ProgressReporter report(cfg, g, log);

  // Recovery hook: roll the survivors forward to the most advanced committed state, then check.
  g.add_recovery_hook([&](recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) {
    if (ev.committed_min != ev.committed_max) {
      int root = 0;
      while (ev.committed[static_cast<size_t>(root)] != ev.committed_max) ++root;
      broadcast_state(grp.comm(), root, *model, *opt, p);
    }
    if (auto bad = ranks_differing(grp.comm(), sha256_of(params)); !bad.empty())
      throw ftcc::Error("parameters differ between survivors after recovery (rank " + std::to_string(bad[0]) + ")");
    grp.set_committed_step(p.step - 1);
    if (cfg.on_failure == "keep-local-batch") {
      // The global batch follows the world size from the next epoch on, so the epoch in flight
      // keeps its exactly-once split.
      global_batch = std::max<std::int64_t>(1, cfg.batch * grp.size() / n0);
    }
  });

  auto done = [&] {
    return cfg.steps > 0 ? p.step >= cfg.steps : p.cursor.epoch >= (cfg.epochs > 0 ? cfg.epochs : 10);
  };
  const std::int64_t outputs = widths.back();
  double last_loss = 0;

  for (;;) {
    if (done()) {
      // The survivors agree that all of them are done; false after a recovery (a rank died at
      // the end, or was one step behind): the hook may have rolled this rank forward, check again.
      if (g.all_finished()) break;
      continue;
    }
    if (p.cursor.step == 0 && sampler->options().global_batch != global_batch) sampler = make_sampler(global_batch);
    g.begin_step(p.step);
    try {
      const auto range = sampler->rank_range(p.cursor.step, g.size(), g.rank());
      const auto ids = sampler->rank_ids(p.cursor, g.size(), g.rank());
      const std::int64_t B = sampler->batch_size(p.cursor.step);
      const double denom = static_cast<double>(B * outputs);
      double loss_part = 0.0;
      data::SampleTally fed;  // the samples this rank feeds to the model in this step
      bool grads_finite = true;
      opt->zero_grad();
      if (!ids.empty()) {
        auto b = td.train.gather(ids, dev);
        if (!cfg.deterministic) {
          auto loss = tensor::mse_loss((*model)(b.x), b.y, denom);
          loss.backward();
          loss_part = loss.item();
          fed.add(p.cursor.epoch, ids);
        }
        if (cfg.deterministic) {
          // One contribution per fixed micro-batch of the global batch (independent of ranks).
          std::vector<std::vector<float>> parts;
          const std::int64_t mb = sampler->options().micro_batch;
          const std::int64_t first = range.begin;
          for (std::int64_t s = range.begin; s < range.end; s += mb) {
            const std::int64_t e = std::min(s + mb, range.end);
            opt->zero_grad();
            auto loss = tensor::mse_loss((*model)(b.x.rows(s - first, e - first)), b.y.rows(s - first, e - first), denom);
            loss.backward();
            loss_part += loss.item();
            fed.add(p.cursor.epoch, std::span<const std::int64_t>(ids).subspan(static_cast<std::size_t>(s - first),
                                                                               static_cast<std::size_t>(e - s)));
            parts.push_back(reducer.snapshot());
          }
          grads_finite = reducer.exact_sum(g.comm(), parts, sampler->micro_batches(p.cursor.step));
        }
      } else if (cfg.deterministic) {
        grads_finite = reducer.exact_sum(g.comm(), {}, sampler->micro_batches(p.cursor.step));
      }
      if (!cfg.deterministic) grads_finite = reducer.sum(g.comm());
      // Loss, non-finite verdicts and the samples fed, summed over the ranks in one allreduce.
      double stats[2 + data::SampleTally::kDoubles] = {loss_part, grads_finite ? 0.0 : 1.0};
      fed.to_doubles(stats + 2);
      fc::allreduce(g.comm(), fc::kInPlace, stats, std::size(stats), fc::DType::f64, fc::ReduceOp::sum);
      // Every rank now holds the same loss, verdict and tally, so every rank decides alike.
      require_finite(stats[0], stats[1] == 0.0, p.step, cfg);
      const auto step_tally = data::SampleTally::from_doubles(stats + 2);
      FTCC_CHECK(step_tally.count == B) << "step " << p.step << " fed " << step_tally.count << " samples, batch is "
                                        << B;
      // Commit: the allreduce completed, so this rank holds the full gradient of step p.step.
      opt->step();
      last_loss = stats[0];
      p.add(step_tally);
      report.add_samples(step_tally.count);
      p.cursor = sampler->next(p.cursor);
      ++p.step;
      g.set_committed_step(p.step - 1);
    } catch (const fc::FaultDetected& e) {
      const auto& ev = g.recover(p.step, e.what());
      report.recovered(ev);
      continue;
    }
    report.step_done(p.step, p.cursor.epoch, last_loss, p.samples_seen);
    if (store && cfg.checkpoint_every > 0 && p.step % cfg.checkpoint_every == 0 && g.rank() == 0) {
      CheckpointInfo info{p.step, p.cursor.epoch, p.cursor.step, p.samples_seen, g.size(), cfg.seed,
                          to_hex(cfg_hash), ""};
      info.samples_digest = p.samples_digest;
      log.checkpoint(p.step, store->save(info, *model, *opt));
    }
  }

  const double eval = td.classification ? accuracy_on(*model, td.test, dev) : mse_on(*model, td.test, dev);
  TrainSummary s = TrainSummary::of_run(mse_on(*model, td.train, dev), last_loss, td.classification, eval, p.step,
                                        p.cursor.epoch, n0, g, p.tally(), sampler->expected_tally(p.cursor),
                                        to_hex(sha256_of(params)), t_start);
  s.step_samples_per_s = report.steady_samples_per_s();
  log.finish(s.to_json());
  return s;
}

}  // namespace ftcc::train
