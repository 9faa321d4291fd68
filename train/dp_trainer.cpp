#include "ftcc/train/dp_trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <memory>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/recovery/step_loop.hpp"
#include "ftcc_config.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/cuda/backend.hpp"
#include "ftcc/tensor/host_buffers.hpp"
#include "ftcc/tensor/storage.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/pinned_buffers.hpp"
#include "ftcc/train/progress_reporter.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/state_hash.hpp"
#include "ftcc/train/state_sync.hpp"
#include "ftcc/train/step_breakdown.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fc = ftcc::comm;

using Progress = TrainProgress;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Progress (with the samples digest accumulated so far) as 5 words, as broadcast and hashed.
std::array<std::int64_t, 5> progress_words(const Progress& p) {
  return {p.cursor.epoch, p.cursor.step, p.step, p.samples_seen, std::bit_cast<std::int64_t>(p.samples_digest)};
}

// Parameters and optimizer state, then the progress, from root to every rank (train/state_sync.hpp).
std::int64_t broadcast_state(fc::Communicator& comm, int root, nn::Module& model, optim::Optimizer& opt, Progress& p) {
  nn::NamedTensors state = model.named_parameters();
  for (auto& nt : opt.state_dict()) state.push_back(nt);
  std::array<std::int64_t, 5> words = progress_words(p);
  const std::int64_t sent = sync_state(comm, root, state, words);
  p = Progress{{words[0], words[1]}, words[2], words[3], std::bit_cast<std::uint64_t>(words[4])};
  return sent;
}

}  // namespace

TrainSummary train_data_parallel(const TrainConfig& cfg, recovery::ResilientGroup& g) {
  cfg.validate();
  FTCC_INVARIANT(cfg.parallel == Parallel::dp) << "train_data_parallel called with --parallel " << choice_name(cfg.parallel);
  const auto t_start = Clock::now();
  const Device dev = cfg.device;
  FTCC_REQUIRE(dev == tensor::Device::CPU || tensor::cuda_available())
      << "--device cuda: no usable CUDA device here (this build "
      << (FTCC_HAVE_CUDA ? "has CUDA kernels, but no GPU or driver was found: " + tensor::cuda::backend_origin()
                         : std::string("was built without CUDA"))
      << "); use --device cpu";

  // Ranks started with different configurations would train different models: refuse (the hot
  // spares too: one of them may train later).
  const Digest cfg_hash = g.respawned() ? config_digest(cfg) : check_same_config(cfg, g.pool(), g.pool_members());
  // A hot spare builds everything a training rank has (its data alone), registers the same
  // recovery hook, and waits; once it takes a lost rank's place the hook has streamed it the state.
  const bool spare = g.is_spare();

  const auto t_data = Clock::now();
  TrainingData td = load_training_data(cfg.dataset, cfg.seed, cfg.held_out, spare ? nullptr : &g.comm());
  const double data_s = seconds_since(t_data);
  require_batch_fits(cfg, td.train.size());
  tensor::host_buffers_release();  // the buffers of the data's preparation will not be asked for again
  const std::vector<std::int64_t> widths = model_widths(cfg.layers, td, cfg.dataset);

  auto model = nn::mlp(widths, cfg.activation, cfg.seed);
  if (dev == tensor::Device::CUDA) model->to(dev);
  const nn::NamedTensors params = model->named_parameters();
  auto opt = make_optimizer(cfg, params);
  GradientReducer reducer(params, static_cast<std::size_t>(cfg.bucket_mb * 1024 * 1024));
  // The buffers of the collectives that are not the model's or the reducer's (train/pinned_buffers.hpp):
  // released when their step or state transfer completed, kept for good when a failure interrupted it.
  Pins pins;

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

  // Resume (or initial weights): rank 0 reads the file into its replica, every rank learns the
  // verdict (train/run_common.hpp), then gets the state by broadcast. Not the spares: a spare
  // that joins gets the state of the moment from the survivors.
  if (spare) {
  } else if (!cfg.resume.empty()) {
    const auto at = load_checkpoint_on_rank0(g.comm(), cfg.resume, "--resume", cfg, widths, log, model.get(), opt.get());
    FTCC_REQUIRE(at.has_value()) << "--resume '" << cfg.resume << "': no valid checkpoint found there";
    p = at->progress;
    log.note("resumed from " + at->path + " (step " + std::to_string(p.step) + ")");
    broadcast_state(g.comm(), 0, *model, *opt, p);
  } else if (!cfg.init_weights.empty()) {
    load_init_weights_on_rank0(g.comm(), cfg, model.get());
    broadcast_state(g.comm(), 0, *model, *opt, p);
    log.note("initial weights from " + cfg.init_weights + " (fresh optimizer state)");
  }
  if (!spare) {
    if (auto bad = ranks_differing(g.comm(), sha256_of(params)); !bad.empty())
      throw ftcc::Error("initial parameters differ between ranks (rank " + std::to_string(bad[0]) + ")");
    g.set_committed_step(p.step - 1);
  }  // a spare's committed step stays -1 (it holds no step of the run)
  if (store) remove_stale_temporaries(*store, g, log);  // once the start is accepted: a refused run touches nothing

  ProgressReporter report(cfg, g, log);

  // Recovery hook: roll the survivors forward to the most advanced committed state, and stream
  // it to the spares that joined (sync_state, which checks by SHA-256 that every rank then holds
  // the same parameters, optimizer state and progress). When every survivor already stood at the
  // same step, the parameters' SHA-256 is still compared.
  g.add_recovery_hook([&](recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) {
    pins.abandoned();  // the interrupted step's (or an interrupted earlier try's) buffers
    if (ev.committed_min != ev.committed_max || !ev.joined.empty()) {
      const auto t0 = Clock::now();
      const std::int64_t bytes = broadcast_state(grp.comm(), newest_holder(ev), *model, *opt, p);
      grp.record_state_transfer(bytes, seconds_since(t0) * 1e3);
    } else if (auto bad = ranks_differing(grp.comm(), sha256_of(params)); !bad.empty()) {
      throw ftcc::Error("parameters differ between survivors after recovery (rank " + std::to_string(bad[0]) + ")");
    }
    grp.set_committed_step(p.step - 1);
    if (cfg.on_failure == OnFailure::keep_local_batch) {
      // The global batch follows the world size from the next epoch on, so the epoch in flight
      // keeps its exactly-once split.
      global_batch = std::max<std::int64_t>(1, cfg.batch * grp.size() / n0);
    }
  });

  if (spare && !g.wait_as_spare()) return TrainSummary{};  // the job finished without needing this spare

  auto done = [&] {
    return cfg.steps > 0 ? p.step >= cfg.steps : p.cursor.epoch >= (cfg.epochs > 0 ? cfg.epochs : 10);
  };
  const LossKind loss_kind = cfg.loss_in_use();
  const double setup_s = seconds_since(t_start);
  double evaluation_s = 0;
  double last_loss = 0;
  EvalFigures figures;
  StepBreakdown timer;

  // One step. Commit: the allreduce completed, so this rank holds the full gradient of step p.step.
  auto train_step = [&] {
    timer.begin_step();
    if (p.cursor.step == 0 && sampler->options().global_batch != global_batch) sampler = make_sampler(global_batch);
    const auto range = sampler->rank_range(p.cursor.step, g.size(), g.rank());
    const auto ids = sampler->rank_ids(p.cursor, g.size(), g.rank());
    const std::int64_t B = sampler->batch_size(p.cursor.step);
    double loss_part = 0.0;
    data::SampleTally fed;  // the samples this rank feeds to the model in this step
    bool grads_finite = true;
    timer.mark(Phase::data);
    opt->zero_grad();
    timer.mark(Phase::optimizer);
    // Buckets are reduced while backward goes on (CPU; a device arena is reduced after backward).
    const bool overlap = cfg.overlap && !cfg.deterministic && dev == Device::CPU;
    if (overlap) reducer.begin_overlap(g.comm());
    if (!ids.empty()) {
      auto b = td.train.gather(ids, dev);
      timer.mark(Phase::data);
      if (!cfg.deterministic) {
        auto loss = batch_loss(loss_kind, (*model)(b.x), b.y, B);
        timer.mark(Phase::forward);
        loss.backward();
        timer.mark(Phase::backward);
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
          timer.mark(Phase::optimizer);
          auto loss = batch_loss(loss_kind, (*model)(b.x.rows(s - first, e - first)), b.y.rows(s - first, e - first), B);
          timer.mark(Phase::forward);
          loss.backward();
          timer.mark(Phase::backward);
          loss_part += loss.item();
          fed.add(p.cursor.epoch, std::span<const std::int64_t>(ids).subspan(static_cast<std::size_t>(s - first),
                                                                             static_cast<std::size_t>(e - s)));
          parts.push_back(reducer.snapshot());
          timer.mark(Phase::backward);
        }
        grads_finite = reducer.exact_sum(g.comm(), parts, sampler->micro_batches(p.cursor.step));
      }
    } else if (cfg.deterministic) {
      grads_finite = reducer.exact_sum(g.comm(), {}, sampler->micro_batches(p.cursor.step));
    }
    if (overlap) grads_finite = reducer.finish_overlap();
    else if (!cfg.deterministic) grads_finite = reducer.sum(g.comm());
    // Loss, non-finite verdicts and the samples fed, summed over the ranks in one allreduce.
    // Pinned, not on this frame's stack: an allreduce interrupted by a failure may still write to it.
    auto& stats_buf = *pins.keep(std::make_shared<std::array<double, 2 + data::SampleTally::kDoubles>>());
    double* stats = stats_buf.data();
    stats[0] = loss_part;
    stats[1] = grads_finite ? 0.0 : 1.0;
    fed.to_doubles(stats + 2);
    fc::allreduce(g.comm(), fc::kInPlace, stats, stats_buf.size(), fc::DType::f64, fc::ReduceOp::sum);
    timer.mark(Phase::exposed_comm);
    // Every rank now holds the same loss, verdict and tally, so every rank decides alike.
    require_finite(stats[0], stats[1] == 0.0, p.step, cfg);
    const auto step_tally = data::SampleTally::from_doubles(stats + 2);
    FTCC_INVARIANT(step_tally.count == B) << "step " << p.step << " fed " << step_tally.count << " samples, batch is "
                                      << B;
    // Commit: the allreduce completed, so this rank holds the full gradient of step p.step.
    opt->step();
    timer.mark(Phase::optimizer);
    last_loss = stats[0];
    p.add(step_tally);
    report.add_samples(step_tally.count);
    p.cursor = sampler->next(p.cursor);
    ++p.step;
    g.set_committed_step(p.step - 1);
    pins.completed();
    timer.end_step();
  };
  std::int64_t peak = 0;
  tensor::reset_peak_cpu_tensor_memory();  // the steps' peak: data, model, optimizer, activations
  recovery::run_step_loop(g, {
      .done = [&] { return done(); },
      .step = [&] { return p.step; },
      .body = train_step,
      .after_step =
          [&] {
            report.step_done(p.step, p.cursor.epoch, last_loss, p.samples_seen);
            if (store && cfg.checkpoint_every > 0 && p.step % cfg.checkpoint_every == 0 && g.rank() == 0) {
              CheckpointInfo info{p.step, p.cursor.epoch, p.cursor.step, p.samples_seen, g.size(), cfg.seed,
                                  to_hex(cfg_hash), ""};
              info.samples_digest = p.samples_digest;
              log.checkpoint(p.step, store->save(info, *model, *opt, commit_check(g, p.step)));
            }
          },
      // The final figures, each rank on its share of the data (a failure here is recovered too).
      .finish =
          [&] {
            peak = static_cast<std::int64_t>(tensor::cpu_tensor_memory().peak);
            fc::allreduce(g.comm(), fc::kInPlace, &peak, 1, fc::DType::i64, fc::ReduceOp::max);
            const auto t_eval = Clock::now();
            figures = evaluate_split(g.comm(), *model, td.train, td.test, td.classification, cfg.loss_in_use(), dev);
            evaluation_s = seconds_since(t_eval);
          },
      .recovered = [&](const recovery::RecoveryEvent& ev) { report.recovered(ev); }});

  TrainSummary s = TrainSummary::of_run(cfg.loss_in_use(), figures.train_loss, last_loss, td.classification, figures.eval, p.step,
                                        p.cursor.epoch, n0, g, p.tally(), sampler->expected_tally(p.cursor),
                                        to_hex(sha256_of(params)), t_start);
  s.step_samples_per_s = report.steady_samples_per_s();
  s.peak_tensor_bytes = peak;
  s.grid = std::to_string(g.size()) + (g.size() == 1 ? " rank" : " ranks");  // every rank one replica
  s.step_ms = timer.to_json();
  // Where the whole run's time went (rank 0's clock): set-up (data included) | steps | evaluation.
  s.wall_split_s = {{"setup", setup_s}, {"data", data_s}, {"evaluation", evaluation_s},
                    {"steps", s.wall_s - setup_s - evaluation_s}};
  require_samples_exact(s);  // every rank alike: a job-level error, not a summary with a false flag
  log.finish(s.to_json());
  return s;
}

}  // namespace ftcc::train
