#include "ftcc/train/pp_trainer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>

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
#include "ftcc/train/partition.hpp"
#include "ftcc/train/pp_stage.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/state_hash.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fc = ftcc::comm;

// User tags (< comm::Communicator::kMaxUserTag).
constexpr int kForwardTag = 1, kBackwardTag = 2, kGatherTag = 16, kRestoreTag = 1024, kReplicaSizeTag = 3000,
              kReplicaTag = 3100;

using Progress = TrainProgress;  // train/dp_trainer.hpp

std::string layer_list(const std::vector<int>& layers) {
  std::ostringstream os;
  for (std::size_t i = 0; i < layers.size(); ++i) os << (i ? ", " : "") << layers[i];
  return os.str();
}

// The (layer, step) states this rank holds: its own snapshots and its predecessors' replicas.
// Every entry is a genuine state of that layer after that many committed steps.
class LayerStore {
 public:
  void put(int layer, std::int64_t step, Bytes bytes) { m_[layer][step] = std::make_shared<Bytes>(std::move(bytes)); }
  const std::shared_ptr<Bytes>& get(int layer, std::int64_t step) const { return m_.at(layer).at(step); }
  // Keep the two newest steps of the layers in `keep`; drop the rest.
  void prune(const std::vector<bool>& keep) {
    for (auto it = m_.begin(); it != m_.end();) {
      if (it->first >= static_cast<int>(keep.size()) || !keep[static_cast<size_t>(it->first)]) {
        it = m_.erase(it);
        continue;
      }
      while (it->second.size() > 2) it->second.erase(it->second.begin());
      ++it;
    }
  }
  void drop_after(std::int64_t step) {
    for (auto& [l, by_step] : m_) by_step.erase(by_step.upper_bound(step), by_step.end());
  }
  void clear() { m_.clear(); }
  // The oldest step of which some layer is held, -1 when none.
  std::int64_t oldest() const {
    std::int64_t o = -1;
    for (const auto& [l, by_step] : m_)
      if (!by_step.empty() && (o < 0 || by_step.begin()->first < o)) o = by_step.begin()->first;
    return o;
  }
  // Two slots per layer: the newest two steps held, -1 when none.
  std::vector<std::int64_t> encode(int num_layers) const {
    std::vector<std::int64_t> e(2 * static_cast<size_t>(num_layers), -1);
    for (const auto& [l, by_step] : m_) {
      int slot = 0;
      for (auto it = by_step.rbegin(); it != by_step.rend() && slot < 2; ++it, ++slot)
        e[2 * static_cast<size_t>(l) + static_cast<size_t>(slot)] = it->first;
    }
    return e;
  }
  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& [l, by_step] : m_)
      for (const auto& [s, v] : by_step) b += v->size();
    return b;
  }

 private:
  std::map<int, std::map<std::int64_t, std::shared_ptr<Bytes>>> m_;
};

}  // namespace

TrainSummary train_pipeline_parallel(const TrainConfig& cfg, recovery::ResilientGroup& g) {
  cfg.validate();
  FTCC_CHECK(cfg.parallel == "pp") << "train_pipeline_parallel called with --parallel " << cfg.parallel;
  const auto t_start = Clock::now();
  FTCC_REQUIRE(cfg.device == "cpu") << "--parallel pp: only --device cpu is supported in this version";
  FTCC_REQUIRE(!cfg.deterministic) << "--parallel pp: --deterministic is not supported (use --parallel dp)";
  FTCC_REQUIRE(cfg.on_failure == "keep-global-batch") << "--parallel pp: only --on-failure keep-global-batch";

  const Digest cfg_hash = check_same_config(cfg, g.comm(), g.members());

  TrainingData td = load_training_data(cfg.dataset, cfg.seed, cfg.held_out);
  const std::vector<std::int64_t> widths = model_widths(cfg.layers, td, cfg.dataset);
  const int L = static_cast<int>(widths.size()) - 1;
  FTCC_REQUIRE(g.size() <= L) << "--parallel pp on " << g.size() << " ranks needs at least " << g.size()
                              << " layers; --layers gives " << L << " (one stage per rank, a stage is at least one "
                              << "Linear+activation)";
  const auto costs = layer_costs(widths);
  const std::int64_t outputs = widths.back();

  const int n0 = g.initial_size();
  data::DistributedSampler sampler({.num_samples = td.train.size(), .global_batch = cfg.batch, .seed = cfg.seed,
                                    .micro_batch = std::min(cfg.micro_batch, cfg.batch)});
  Progress p;
  // The progress at each step of which `store` holds layers: what a rollback to that step restores.
  std::map<std::int64_t, Progress> recorded;

  std::vector<int> bounds = partition_layers(costs, g.size());
  auto stage = std::make_unique<PipelineStage>(cfg, widths, bounds[static_cast<size_t>(g.rank())],
                                               bounds[static_cast<size_t>(g.rank()) + 1]);
  LayerStore store;
  Pins pins;

  RunLog log(cfg, g, sampler.steps_per_epoch());
  std::unique_ptr<CheckpointStore> ckpt;
  if (!cfg.checkpoint_dir.empty()) ckpt = std::make_unique<CheckpointStore>(cfg.checkpoint_dir, cfg, widths);

  // The full model on rank 0 (checkpoints, final metrics): built on demand.
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
  auto full_layer = [&](int l) { return layer_state(full->named_parameters(), full_opt->state_dict(), l); };

  // Every stage's layers to rank 0's full model.
  auto gather_full = [&](fc::Communicator& c) {
    if (c.rank() == 0) {
      ensure_full();
      for (int l = 0; l < L; ++l) {
        const auto list = full_layer(l);
        if (stage->holds(l)) {
          nn::unpack_bytes(list, stage->pack_layer(l));
        } else {
          auto b = pins.keep(std::make_shared<Bytes>(nn::total_bytes(list)));
          recv_bytes(c, *b, stage_of(bounds, l), kGatherTag);
          nn::unpack_bytes(list, *b);
        }
      }
    } else {
      for (int l = stage->first(); l < stage->last(); ++l)
        send_bytes(c, *pins.keep(std::make_shared<Bytes>(stage->pack_layer(l))), 0, kGatherTag);
    }
  };
  // Rank 0's full model to the stages that own each layer.
  auto scatter_full = [&](fc::Communicator& c) {
    for (int l = 0; l < L; ++l) {
      const int owner = stage_of(bounds, l);
      if (c.rank() == 0) {
        auto b = pins.keep(std::make_shared<Bytes>(nn::pack_bytes(full_layer(l))));
        if (owner == 0) stage->unpack_layer(l, *b);
        else send_bytes(c, *b, owner, kRestoreTag);
      } else if (owner == c.rank()) {
        auto b = pins.keep(std::make_shared<Bytes>(stage->layer_bytes(l)));
        recv_bytes(c, *b, 0, kRestoreTag);
        stage->unpack_layer(l, *b);
      }
    }
  };
  // Rank 0 loads the newest valid checkpoint of `dir` and every stage gets its layers. Returns
  // false when there is none; throws InvalidArgument (same text on every rank, prefixed by `flag`)
  // when it does not fit or was written with another configuration (CheckpointStore).
  auto restore_checkpoint = [&](fc::Communicator& c, const std::string& dir, std::string& path,
                                const char* flag = "checkpoint") -> bool {
    // status (1 loaded, 0 none, -1 error), step, epoch, cursor step, samples, samples digest
    std::int64_t head[6] = {0, 0, 0, 0, 0, 0};
    std::array<char, 1024> message{};
    if (c.rank() == 0) {
      try {
        CheckpointStore from(dir, cfg, widths);  // refuses a checkpoint of another configuration
        auto info = from.newest_valid([&](const std::string& note) { log.note(note); });
        if (info) {
          ensure_full();
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
    scatter_full(c);
    p = Progress{{head[2], head[3]}, head[1], head[4], std::bit_cast<std::uint64_t>(head[5])};
    path = message.data();
    return true;
  };

  // Snapshot this rank's layers at the current step and send them to the next K ranks (ring).
  auto replicate = [&](fc::Communicator& c) {
    const int n = c.size(), me = c.rank();
    recorded[p.step] = p;
    auto mine_p = pins.keep(std::make_shared<Bytes>());
    auto sizes_p = pins.keep(std::make_shared<std::vector<std::int64_t>>());
    Bytes& mine = *mine_p;
    std::vector<std::int64_t>& sizes = *sizes_p;
    for (int l = stage->first(); l < stage->last(); ++l) {
      Bytes b = stage->pack_layer(l);
      sizes.push_back(static_cast<std::int64_t>(b.size()));
      mine.insert(mine.end(), b.begin(), b.end());
      store.put(l, p.step, std::move(b));
    }
    const int k = std::min(cfg.replicas, n - 1);
    std::vector<bool> keep(static_cast<size_t>(L), false);
    for (int l = stage->first(); l < stage->last(); ++l) keep[static_cast<size_t>(l)] = true;
    for (int j = 1; j <= k; ++j) {
      const int dst = (me + j) % n, src = (me - j + n) % n;
      const int sf = bounds[static_cast<size_t>(src)], sl = bounds[static_cast<size_t>(src) + 1];
      auto their_p = pins.keep(std::make_shared<std::vector<std::int64_t>>(static_cast<size_t>(sl - sf)));
      std::vector<std::int64_t>& their = *their_p;
      auto s1 = c.isend(sizes.data(), sizes.size(), fc::DType::i64, dst, kReplicaSizeTag + j);
      auto s2 = c.isend(mine.data(), mine.size() / 4, fc::DType::i32, dst, kReplicaTag + j);
      c.recv(their.data(), their.size(), fc::DType::i64, src, kReplicaSizeTag + j);
      std::int64_t total = 0;
      for (auto s : their) total += s;
      auto payload_p = pins.keep(std::make_shared<Bytes>(static_cast<size_t>(total)));
      Bytes& payload = *payload_p;
      c.recv(payload.data(), payload.size() / 4, fc::DType::i32, src, kReplicaTag + j);
      s1.wait();
      s2.wait();
      std::size_t off = 0;
      for (int l = sf; l < sl; ++l) {
        const auto sz = static_cast<size_t>(their[static_cast<size_t>(l - sf)]);
        store.put(l, p.step, Bytes(payload.begin() + static_cast<std::ptrdiff_t>(off),
                                   payload.begin() + static_cast<std::ptrdiff_t>(off + sz)));
        off += sz;
        keep[static_cast<size_t>(l)] = true;
      }
    }
    store.prune(keep);
    const std::int64_t oldest = store.oldest();
    std::erase_if(recorded, [&](const auto& e) { return e.first < oldest; });
  };

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

  // Recovery: re-partition over the survivors and rebuild every stage at the newest step of which
  // a complete copy survives (or from the newest checkpoint), then refresh the replicas.
  g.add_recovery_hook([&](recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) {
    pins.abandoned();  // the buffers of the interrupted step (or of an interrupted earlier try)
    fc::Communicator& c = grp.comm();
    const int n = c.size(), me = c.rank();
    const auto enc = store.encode(L);
    std::vector<std::int64_t> all(enc.size() * static_cast<size_t>(n));
    fc::allgather(c, enc.data(), all.data(), enc.size(), fc::DType::i64);
    std::vector<std::vector<LayerHolding>> holdings(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
      for (int l = 0; l < L; ++l)
        for (int slot = 0; slot < 2; ++slot) {
          const auto s = all[static_cast<size_t>(r) * enc.size() + 2 * static_cast<size_t>(l) + static_cast<size_t>(slot)];
          if (s >= 0) holdings[static_cast<size_t>(r)].push_back({l, s});
        }
    const RestorePlan plan = plan_restore(holdings, L);
    FTCC_REQUIRE(n <= L) << "--parallel pp: " << n << " survivors for " << L << " layers";
    const std::vector<int> nb = partition_layers(costs, n);
    auto fresh = std::make_unique<PipelineStage>(cfg, widths, nb[static_cast<size_t>(me)], nb[static_cast<size_t>(me) + 1]);
    std::ostringstream failed;
    for (std::size_t i = 0; i < ev.failed.size(); ++i) failed << (i ? ", " : "") << ev.failed[i];
    if (plan.step >= 0) {
      std::vector<fc::P2PRequest> reqs;
      std::map<int, std::shared_ptr<Bytes>> incoming;
      for (int l = 0; l < L; ++l) {
        const int owner = stage_of(nb, l), holder = plan.holder[static_cast<size_t>(l)];
        if (holder == me && owner != me) {
          const Bytes& b = *pins.keep(store.get(l, plan.step));
          reqs.push_back(c.isend(b.data(), b.size() / 4, fc::DType::i32, owner, kRestoreTag + l));
        } else if (owner == me && holder != me) {
          Bytes& b = *(incoming[l] = pins.keep(std::make_shared<Bytes>(fresh->layer_bytes(l))));
          reqs.push_back(c.irecv(b.data(), b.size() / 4, fc::DType::i32, holder, kRestoreTag + l));
        }
      }
      for (auto& r : reqs) r.wait();
      // The cursor, samples seen and digest recorded at that step (checked equal on every survivor).
      const auto at = recorded.find(plan.step);
      const Progress restored = agree_progress(c, at == recorded.end() ? nullptr : &at->second, plan.step);
      for (int l = fresh->first(); l < fresh->last(); ++l)
        fresh->unpack_layer(l, incoming.count(l) ? *incoming[l] : *store.get(l, plan.step));
      store.drop_after(plan.step);
      recorded.erase(recorded.upper_bound(plan.step), recorded.end());
      p = restored;
      stage = std::move(fresh);
      bounds = nb;
      log.note("pp: lost rank(s) " + failed.str() + "; " + std::to_string(L) + " layers re-partitioned over " +
               std::to_string(n) + " ranks from in-memory copies, rolled back to step " + std::to_string(plan.step));
    } else {
      std::string what = "pp: layers " + layer_list(plan.lost) + " were held only by the failed rank(s) " + failed.str() +
                         " (own copy and all " + std::to_string(cfg.replicas) + " buddy replica(s)): no in-memory copy left";
      if (!ckpt) {
        what += "; no --checkpoint-dir to fall back to: training state lost, stopping";
        log.note(what);
        throw TrainingStateLost(what);
      }
      stage = std::move(fresh);
      bounds = nb;
      std::string path;
      if (!restore_checkpoint(c, cfg.checkpoint_dir, path)) {
        what += "; no valid checkpoint in '" + cfg.checkpoint_dir + "' to fall back to: training state lost, stopping";
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

  for (;;) {
    try {
      if (done()) {
        // Every survivor done? (recovery/resilient_group.hpp, all_finished); after a recovery
        // the restored state may need steps again.
        if (!g.all_finished()) continue;
        // Final metrics from the full model gathered on rank 0; a failure here is recovered like
        // any other (and the steps after the restored copy are redone).
        fc::Communicator& c = g.comm();
        gather_full(c);
        final = final_metrics(c, full.get(), td.train, td.test, td.classification);
        break;
      }
      g.begin_step(p.step);
      fc::Communicator& c = g.comm();
      const int me = c.rank(), n = c.size();
      const bool first = me == 0, last = me == n - 1;
      const auto ids = sampler.batch(p.cursor);
      const auto B = static_cast<std::int64_t>(ids.size());
      const double denom = static_cast<double>(B * outputs);
      data::Batch b;
      if (first || last) b = td.train.gather(ids);
      const std::int64_t M = std::min<std::int64_t>(cfg.micro_batches, B);
      std::vector<tensor::Tensor> ins(static_cast<size_t>(M)), outs(static_cast<size_t>(M));
      double loss_sum = 0.0;
      data::SampleTally fed;  // the first stage: the rows it feeds to the model
      stage->optimizer().zero_grad();
      // GPipe: every micro-batch forward, then every backward in reverse.
      for (std::int64_t k = 0; k < M; ++k) {
        const std::int64_t s = k * B / M, e = (k + 1) * B / M;
        tensor::Tensor in;
        if (first) {
          in = b.x.rows(s, e);
          fed.add(p.cursor.epoch, std::span<const std::int64_t>(ids).subspan(static_cast<std::size_t>(s),
                                                                             static_cast<std::size_t>(e - s)));
        } else {
          in = pins.keep(tensor::Tensor::empty({e - s, stage->in_width()}));
          c.recv(in.data(), static_cast<size_t>(in.numel()), fc::DType::f32, me - 1, kForwardTag);
          in.requires_grad_(true);
        }
        tensor::Tensor out = stage->forward(in);
        if (last) {
          out = tensor::mse_loss(out, b.y.rows(s, e), denom);
          loss_sum += out.item();
        } else {
          c.send(pins.keep(out).data(), static_cast<size_t>(out.numel()), fc::DType::f32, me + 1, kForwardTag);
        }
        ins[static_cast<size_t>(k)] = in;
        outs[static_cast<size_t>(k)] = out;
      }
      for (std::int64_t k = M - 1; k >= 0; --k) {
        tensor::Tensor& out = outs[static_cast<size_t>(k)];
        if (last) {
          out.backward();
        } else {
          tensor::Tensor grad = pins.keep(tensor::Tensor::empty(out.shape()));
          c.recv(grad.data(), static_cast<size_t>(grad.numel()), fc::DType::f32, me + 1, kBackwardTag);
          tensor::run_backward(out, grad);
        }
        if (!first) {
          const tensor::Tensor gin = pins.keep(ins[static_cast<size_t>(k)].grad());
          c.send(gin.data(), static_cast<size_t>(gin.numel()), fc::DType::f32, me - 1, kBackwardTag);
        }
        out = tensor::Tensor();
        ins[static_cast<size_t>(k)] = tensor::Tensor();
      }
      // The last stage's loss, each stage's non-finite gradient verdict and the first stage's rows,
      // summed over the stages: every rank then decides alike. Commit point: every stage finished
      // its backward of p.step; each then takes its optimizer step.
      double stats[2 + data::SampleTally::kDoubles] = {loss_sum,
                                                       all_finite(nn::gradients_of(stage->params())) ? 0.0 : 1.0};
      fed.to_doubles(stats + 2);
      fc::allreduce(c, fc::kInPlace, stats, std::size(stats), fc::DType::f64, fc::ReduceOp::sum);
      require_finite(stats[0], stats[1] == 0.0, p.step, cfg);
      stage->optimizer().step();
      last_loss = stats[0];
      const auto step_tally = data::SampleTally::from_doubles(stats + 2);
      p.add(step_tally);
      report.add_samples(step_tally.count);
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
    log.note("pp: stage state " + std::to_string(stage->state_bytes()) + " B, replica/snapshot store " +
             std::to_string(store.bytes()) + " B on rank 0");
  log.finish(s.to_json());
  return s;
}

}  // namespace ftcc::train
