#include "ftcc/train/tp_trainer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/progress_reporter.hpp"
#include "ftcc/train/mp_support.hpp"
#include "ftcc/train/pp_stage.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/state_hash.hpp"
#include "ftcc/train/tp_shard.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fc = ftcc::comm;

constexpr int kGatherTag = 16, kReplicaSizeTag = 3000, kReplicaTag = 3100;

// Each rank feeds the whole batch to its slices, so each rank's own count and digest of the rows
// it fed is the run's; the ranks' are compared after a failure and at the end (agree_progress).
using Progress = TrainProgress;  // train/dp_trainer.hpp

tensor::Tensor activate(const std::string& a, const tensor::Tensor& x) {
  if (a == "tanh") return tensor::tanh(x);
  if (a == "sigmoid") return tensor::sigmoid(x);
  return tensor::relu(x);
}

// Snapshots and replicas of shards: key (step, ranks of that step's split, shard index).
using ShardKey = std::tuple<std::int64_t, int, int>;

class ShardStore {
 public:
  void put(const ShardKey& k, Bytes b) { m_[k] = std::make_shared<Bytes>(std::move(b)); }
  const std::shared_ptr<Bytes>& get(const ShardKey& k) const { return m_.at(k); }
  // Keep the entries of the two newest steps.
  void prune() {
    std::vector<std::int64_t> steps;
    for (const auto& [k, v] : m_) steps.push_back(std::get<0>(k));
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    if (steps.size() <= 2) return;
    const std::int64_t oldest_kept = steps[steps.size() - 2];
    std::erase_if(m_, [&](const auto& e) { return std::get<0>(e.first) < oldest_kept; });
  }
  void drop_after(std::int64_t s) {
    std::erase_if(m_, [&](const auto& e) { return std::get<0>(e.first) > s; });
  }
  void clear() { m_.clear(); }
  // The oldest step held, -1 when none.
  std::int64_t oldest() const { return m_.empty() ? -1 : std::get<0>(m_.begin()->first); }
  // `slots` entries of (step, n, shard), newest first, padded with -1.
  std::vector<std::int64_t> encode(int slots) const {
    std::vector<std::int64_t> e(3 * static_cast<size_t>(slots), -1);
    int i = 0;
    for (auto it = m_.rbegin(); it != m_.rend() && i < slots; ++it, ++i) {
      e[3 * static_cast<size_t>(i)] = std::get<0>(it->first);
      e[3 * static_cast<size_t>(i) + 1] = std::get<1>(it->first);
      e[3 * static_cast<size_t>(i) + 2] = std::get<2>(it->first);
    }
    return e;
  }
  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& [k, v] : m_) b += v->size();
    return b;
  }

 private:
  std::map<ShardKey, std::shared_ptr<Bytes>> m_;
};

}  // namespace

TrainSummary train_tensor_parallel(const TrainConfig& cfg, recovery::ResilientGroup& g) {
  cfg.validate();
  FTCC_CHECK(cfg.parallel == "tp") << "train_tensor_parallel called with --parallel " << cfg.parallel;
  const auto t_start = Clock::now();
  FTCC_REQUIRE(cfg.device == "cpu") << "--parallel tp: only --device cpu is supported in this version";
  FTCC_REQUIRE(!cfg.deterministic) << "--parallel tp: --deterministic is not supported (use --parallel dp)";
  FTCC_REQUIRE(cfg.on_failure == "keep-global-batch") << "--parallel tp: only --on-failure keep-global-batch";
  const Digest cfg_hash = check_same_config(cfg, g.comm(), g.members());

  TrainingData td = load_training_data(cfg.dataset, cfg.seed, cfg.held_out);
  const std::vector<std::int64_t> widths = model_widths(cfg.layers, td, cfg.dataset);
  const int L = static_cast<int>(widths.size()) - 1;
  FTCC_REQUIRE(L >= 2) << "--parallel tp needs at least one column/row-parallel Linear pair (3 widths); --layers gives "
                       << L << " layer";
  for (int i = 0; i + 1 < L; i += 2) {
    const std::int64_t h = widths[static_cast<size_t>(i) + 1];
    FTCC_REQUIRE(h % g.size() == 0) << "--parallel tp on " << g.size() << " ranks: the hidden width " << h
                                    << " of layers " << i << "-" << i + 1 << " (column-parallel Linear "
                                    << widths[static_cast<size_t>(i)] << "->" << h << ", row-parallel " << h << "->"
                                    << widths[static_cast<size_t>(i) + 2] << ") is not divisible by " << g.size();
  }
  const std::int64_t outputs = widths.back();
  const int n0 = g.initial_size();
  data::DistributedSampler sampler({.num_samples = td.train.size(), .global_batch = cfg.batch, .seed = cfg.seed,
                                    .micro_batch = std::min(cfg.micro_batch, cfg.batch)});
  Progress p;
  // The progress at each step of which `store` holds shards: what a rollback to that step restores.
  std::map<std::int64_t, Progress> recorded;
  RunLog log(cfg, g, sampler.steps_per_epoch());
  std::unique_ptr<CheckpointStore> ckpt;
  if (!cfg.checkpoint_dir.empty()) ckpt = std::make_unique<CheckpointStore>(cfg.checkpoint_dir, cfg, widths);
  Pins pins;
  ShardStore store;

  // A full-size model, only while it is needed (start, recovery, checkpoint, final metrics).
  std::shared_ptr<nn::Sequential> full;
  std::unique_ptr<optim::Optimizer> full_opt;
  auto ensure_full = [&] {
    if (!full) {
      full = nn::mlp(widths, cfg.activation == "tanh" ? nn::Activation::Tanh
                             : cfg.activation == "sigmoid" ? nn::Activation::Sigmoid
                                                           : nn::Activation::ReLU,
                     cfg.seed);
      full_opt = make_stage_optimizer(cfg, full->named_parameters());
    }
  };
  auto release_full = [&] {
    full_opt.reset();
    full.reset();
  };
  auto full_list = [&] {
    nn::NamedTensors l = full->named_parameters();
    for (auto& nt : full_opt->state_dict()) l.push_back(nt);
    return l;
  };

  // This rank's shard: parameters with the full model's names and slice shapes, its optimizer.
  nn::NamedTensors params;
  std::map<std::string, tensor::Tensor> by_name;
  std::unique_ptr<optim::Optimizer> opt;
  int split_n = 0, split_r = 0;
  auto live_list = [&] {
    nn::NamedTensors l = params;
    for (auto& nt : opt->state_dict()) l.push_back(nt);
    return l;
  };
  // (Re)builds this rank's shard for n ranks from the full model.
  auto slice_from_full = [&](int n, int r) {
    params.clear();
    by_name.clear();
    for (const auto& [name, t] : full->named_parameters()) {
      auto s = tensor::Tensor::zeros(shard_shape(name, t, L, n, r));
      s.requires_grad_(true);
      params.emplace_back(name, s);
      by_name[name] = s;
    }
    opt = make_stage_optimizer(cfg, params);
    Bytes b(shard_bytes(full_list(), L, n, r));
    copy_shard(full_list(), L, n, r, b, /*to_full=*/false);
    nn::unpack_bytes(live_list(), b);
    split_n = n;
    split_r = r;
  };
  auto P = [&](int layer, const char* what) { return by_name.at(std::to_string(2 * layer) + "." + what); };

  // Every shard into rank 0's full model.
  auto gather_full = [&](fc::Communicator& c) {
    if (c.rank() == 0) {
      ensure_full();
      const auto fl = full_list();
      for (int r = 0; r < c.size(); ++r) {
        auto b = pins.keep(std::make_shared<Bytes>(shard_bytes(fl, L, c.size(), r)));
        if (r == 0) *b = nn::pack_bytes(live_list());
        else recv_bytes(c, *b, r, kGatherTag);
        copy_shard(fl, L, c.size(), r, *b, /*to_full=*/true);
      }
    } else {
      send_bytes(c, *pins.keep(std::make_shared<Bytes>(nn::pack_bytes(live_list()))), 0, kGatherTag);
    }
  };
  // Rank 0 loads the newest valid checkpoint of `dir`; every rank gets the full model and slices.
  auto restore_checkpoint = [&](fc::Communicator& c, const std::string& dir, std::string& path,
                                const char* flag = "checkpoint") -> bool {
    std::int64_t head[6] = {0, 0, 0, 0, 0, 0};  // status, step, epoch, cursor step, samples, samples digest
    std::array<char, 1024> message{};
    ensure_full();
    if (c.rank() == 0) {
      try {
        CheckpointStore from(dir, cfg, widths);  // refuses a checkpoint of another configuration
        auto info = from.newest_valid([&](const std::string& note) { log.note(note); });
        if (info) {
          CheckpointStore::load(*info, *full, *full_opt);
          head[0] = 1;
          head[1] = info->step;
          head[2] = info->epoch;
          head[3] = info->cursor_step;
          head[4] = info->samples_seen;
          head[5] = std::bit_cast<std::int64_t>(info->samples_digest);
          std::snprintf(message.data(), message.size(), "%s", info->path.c_str());
        }
      } catch (const std::exception& e) {
        head[0] = -1;
        std::snprintf(message.data(), message.size(), "%s '%s': %s", flag, dir.c_str(), e.what());
      }
    }
    fc::broadcast(c, head, 6, fc::DType::i64, 0);
    fc::broadcast(c, message.data(), message.size() / 8, fc::DType::i64, 0);
    if (head[0] == -1) throw ftcc::InvalidArgument(std::string(message.data()));
    if (head[0] == 0) return false;
    auto b = pins.keep(std::make_shared<Bytes>(nn::pack_bytes(full_list())));
    fc::broadcast(c, b->data(), b->size() / 4, fc::DType::i32, 0);
    nn::unpack_bytes(full_list(), *b);
    slice_from_full(c.size(), c.rank());
    release_full();
    p = Progress{{head[2], head[3]}, head[1], head[4], std::bit_cast<std::uint64_t>(head[5])};
    path = message.data();
    return true;
  };
  // Snapshot this rank's shard and send it to the next K ranks (ring).
  auto replicate = [&](fc::Communicator& c) {
    const int n = c.size(), me = c.rank();
    auto mine = pins.keep(std::make_shared<Bytes>(nn::pack_bytes(live_list())));
    store.put({p.step, n, me}, *mine);
    recorded[p.step] = p;
    const int k = std::min(cfg.replicas, n - 1);
    for (int j = 1; j <= k; ++j) {
      const int dst = (me + j) % n, src = (me - j + n) % n;
      auto size_out = pins.keep(std::make_shared<std::int64_t>(static_cast<std::int64_t>(mine->size())));
      auto size_in = pins.keep(std::make_shared<std::int64_t>(0));
      auto s1 = c.isend(size_out.get(), 1, fc::DType::i64, dst, kReplicaSizeTag + j);
      auto s2 = c.isend(mine->data(), mine->size() / 4, fc::DType::i32, dst, kReplicaTag + j);
      c.recv(size_in.get(), 1, fc::DType::i64, src, kReplicaSizeTag + j);
      auto payload = pins.keep(std::make_shared<Bytes>(static_cast<size_t>(*size_in)));
      c.recv(payload->data(), payload->size() / 4, fc::DType::i32, src, kReplicaTag + j);
      s1.wait();
      s2.wait();
      store.put({p.step, n, src}, *payload);
    }
    store.prune();
    const std::int64_t oldest = store.oldest();
    std::erase_if(recorded, [&](const auto& e) { return e.first < oldest; });
  };

  ensure_full();
  slice_from_full(g.size(), g.rank());
  release_full();
  if (!cfg.resume.empty()) {
    std::string path;
    FTCC_REQUIRE(restore_checkpoint(g.comm(), cfg.resume, path, "--resume"))
        << "--resume '" << cfg.resume << "': no valid checkpoint found there";
    log.note("resumed from " + path + " (step " + std::to_string(p.step) + ")");
  }
  g.set_committed_step(p.step - 1);
  replicate(g.comm());
  pins.completed();

  ProgressReporter report(cfg, g, log);

  const int slots = 4 * (std::min(cfg.replicas, std::max(n0 - 1, 0)) + 1) + 4;
  g.add_recovery_hook([&](recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) {
    pins.abandoned();
    fc::Communicator& c = grp.comm();
    const int n = c.size(), me = c.rank();
    const auto enc = store.encode(slots);
    std::vector<std::int64_t> all(enc.size() * static_cast<size_t>(n));
    fc::allgather(c, enc.data(), all.data(), enc.size(), fc::DType::i64);
    // Newest (step, split) of which every shard has a holder; holder = lowest rank with it.
    std::map<std::pair<std::int64_t, int>, std::map<int, int>> have;  // (step, n_s) -> shard -> holder
    for (int r = n - 1; r >= 0; --r)
      for (int i = 0; i < slots; ++i) {
        const auto* e = &all[static_cast<size_t>(r) * enc.size() + 3 * static_cast<size_t>(i)];
        if (e[0] >= 0) have[{e[0], static_cast<int>(e[1])}][static_cast<int>(e[2])] = r;
      }
    std::int64_t step = -1;
    int ns = 0;
    std::map<int, int> holders;
    std::vector<int> missing;
    for (auto it = have.rbegin(); it != have.rend(); ++it) {
      if (static_cast<int>(it->second.size()) == it->first.second) {
        std::tie(step, ns) = it->first;
        holders = it->second;
        break;
      }
    }
    if (step < 0 && !have.empty()) {
      const auto& newest = *have.rbegin();
      for (int k = 0; k < newest.first.second; ++k)
        if (!newest.second.count(k)) missing.push_back(k);
    }
    std::ostringstream failed;
    for (std::size_t i = 0; i < ev.failed.size(); ++i) failed << (i ? ", " : "") << ev.failed[i];
    FTCC_REQUIRE(min_split_width(widths) >= n) << "--parallel tp: " << n << " survivors but a hidden width of only "
                                               << min_split_width(widths);
    if (step >= 0) {
      ensure_full();
      const auto fl = full_list();
      for (int k = 0; k < ns; ++k) {
        const int h = holders.at(k);
        auto b = pins.keep(std::make_shared<Bytes>(shard_bytes(fl, L, ns, k)));
        if (h == me) *b = *store.get({step, ns, k});
        fc::broadcast(c, b->data(), b->size() / 4, fc::DType::i32, h);
        copy_shard(fl, L, ns, k, *b, /*to_full=*/true);
      }
      // The cursor, samples seen and digest recorded at that step (checked equal on every survivor).
      const auto at = recorded.find(step);
      const Progress restored = agree_progress(c, at == recorded.end() ? nullptr : &at->second, step);
      slice_from_full(n, me);
      release_full();
      store.drop_after(step);
      recorded.erase(recorded.upper_bound(step), recorded.end());
      p = restored;
      log.note("tp: lost rank(s) " + failed.str() + "; " + std::to_string(ns) + " shards re-split over " +
               std::to_string(n) + " ranks from in-memory copies, rolled back to step " + std::to_string(step));
    } else {
      std::ostringstream lost;
      for (std::size_t i = 0; i < missing.size(); ++i) lost << (i ? ", " : "") << missing[i];
      std::string what = "tp: shard(s) " + lost.str() + " were held only by the failed rank(s) " + failed.str() +
                         " (own copy and all " + std::to_string(cfg.replicas) + " buddy replica(s)): no in-memory copy left";
      std::string path;
      if (!ckpt || !restore_checkpoint(c, cfg.checkpoint_dir, path)) {
        what += ckpt ? "; no valid checkpoint in '" + cfg.checkpoint_dir + "' to fall back to: training state lost, stopping"
                     : "; no --checkpoint-dir to fall back to: training state lost, stopping";
        log.note(what);
        throw TrainingStateLost(what);
      }
      store.clear();
      recorded.clear();
      log.note(what + "; FALLING BACK TO CHECKPOINT " + path + " (step " + std::to_string(p.step) + ")");
    }
    grp.set_committed_step(p.step - 1);
    replicate(c);
  });

  auto done = [&] {
    return cfg.steps > 0 ? p.step >= cfg.steps : p.cursor.epoch >= (cfg.epochs > 0 ? cfg.epochs : 10);
  };
  double last_loss = 0;
  FinalMetrics final;
  const int pairs = L / 2;

  for (;;) {
    try {
      if (done()) {
        // Every survivor done? (recovery/resilient_group.hpp, all_finished); after a recovery
        // the restored state may need steps again.
        if (!g.all_finished()) continue;
        // Final metrics from the full model gathered on rank 0; a failure here is recovered like
        // any other (and the steps after the restored copy are redone).
        fc::Communicator& c = g.comm();
        agree_progress(c, &p, p.step);  // every rank fed the same samples (throws otherwise)
        gather_full(c);
        final = final_metrics(c, full.get(), td.train, td.test, td.classification);
        break;
      }
      g.begin_step(p.step);
      fc::Communicator& c = g.comm();
      FTCC_CHECK(split_n == c.size() && split_r == c.rank()) << "tp shard is for " << split_n << " ranks";
      const auto ids = sampler.batch(p.cursor);
      const auto B = static_cast<std::int64_t>(ids.size());
      data::Batch b = td.train.gather(ids);
      data::SampleTally fed;  // the rows this rank feeds to its slices: the whole batch
      fed.add(p.cursor.epoch, ids);
      opt->zero_grad();
      // Forward, one autograd segment per side of each allreduce: X_j -> z_j (partial), Z_j -> Y_j.
      std::vector<tensor::Tensor> X(static_cast<size_t>(pairs)), z(X.size()), Z(X.size()), Y(X.size());
      tensor::Tensor h = b.x;
      for (int j = 0; j < pairs; ++j) {
        const int col = 2 * j, row = 2 * j + 1;
        tensor::Tensor x = h;
        if (j > 0) {
          x = h.detach().clone();
          x.requires_grad_(true);
        }
        const auto a = activate(cfg.activation, tensor::linear(x, P(col, "weight"), P(col, "bias")));
        const auto zr = tensor::linear(a, P(row, "weight"), tensor::Tensor());
        tensor::Tensor zs = pins.keep(zr.detach().clone());
        fc::allreduce(c, fc::kInPlace, zs.data(), static_cast<size_t>(zs.numel()), fc::DType::f32, fc::ReduceOp::sum);
        zs.requires_grad_(true);
        tensor::Tensor y = tensor::add(zs, P(row, "bias"));
        if (row + 1 < L) y = activate(cfg.activation, y);
        X[static_cast<size_t>(j)] = x;
        z[static_cast<size_t>(j)] = zr;
        Z[static_cast<size_t>(j)] = zs;
        Y[static_cast<size_t>(j)] = y;
        h = y;
      }
      // Tail: the replicated last layer (odd layer count) and the loss.
      tensor::Tensor t = h.detach().clone();
      t.requires_grad_(true);
      tensor::Tensor out = t;
      if (L % 2 == 1) out = tensor::linear(t, P(L - 1, "weight"), P(L - 1, "bias"));
      auto loss = tensor::mse_loss(out, b.y, static_cast<double>(B * outputs));
      loss.backward();
      tensor::Tensor grad = t.grad();
      for (int j = pairs - 1; j >= 0; --j) {
        tensor::run_backward(Y[static_cast<size_t>(j)], grad);
        tensor::run_backward(z[static_cast<size_t>(j)], Z[static_cast<size_t>(j)].grad());
        if (j > 0) {
          grad = pins.keep(X[static_cast<size_t>(j)].grad().clone());
          fc::allreduce(c, fc::kInPlace, grad.data(), static_cast<size_t>(grad.numel()), fc::DType::f32,
                        fc::ReduceOp::sum);
        }
      }
      // The loss (the same on every rank: rank 0's is taken) and each rank's non-finite gradient
      // verdict, so that every rank decides alike before any shard steps.
      double stats[2] = {c.rank() == 0 ? loss.item() : 0.0, all_finite(nn::gradients_of(params)) ? 0.0 : 1.0};
      fc::allreduce(c, fc::kInPlace, stats, 2, fc::DType::f64, fc::ReduceOp::sum);
      require_finite(stats[0], stats[1] == 0.0, p.step, cfg);
      opt->step();
      last_loss = stats[0];
      p.add(fed);
      report.add_samples(fed.count);
      p.cursor = sampler.next(p.cursor);
      ++p.step;
      g.set_committed_step(p.step - 1);
      if (p.step % cfg.replicate_every == 0) replicate(c);
      if (ckpt && cfg.checkpoint_every > 0 && p.step % cfg.checkpoint_every == 0) {
        gather_full(c);
        if (c.rank() == 0) {
          CheckpointInfo info{p.step, p.cursor.epoch, p.cursor.step, p.samples_seen, c.size(), cfg.seed,
                              to_hex(cfg_hash), ""};
          info.samples_digest = p.samples_digest;
          log.checkpoint(p.step, ckpt->save(info, *full, *full_opt));
          release_full();
        }
      }
      pins.completed();
    } catch (const fc::FaultDetected& e) {
      pins.abandoned();
      const auto& ev = g.recover(p.step, e.what());
      report.recovered(ev);
      continue;
    }
    report.step_done(p.step, p.cursor.epoch, last_loss, p.samples_seen);
  }

  TrainSummary s = TrainSummary::of_run(final.train_mse, last_loss, td.classification, final.eval, p.step, p.cursor.epoch, n0, g,
                                        p.tally(), sampler.expected_tally(p.cursor), to_hex(final.digest), t_start);
  s.step_samples_per_s = report.steady_samples_per_s();
  if (!cfg.quiet)
    log.note("tp: shard state " + std::to_string(nn::total_bytes(live_list())) + " B, replica/snapshot store " +
           std::to_string(store.bytes()) + " B on rank 0");
  log.finish(s.to_json());
  return s;
}

}  // namespace ftcc::train
