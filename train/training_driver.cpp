#include "ftcc/train/mp_driver.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <sstream>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/subgroup_transport.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/recovery/step_loop.hpp"
#include "ftcc/tensor/host_buffers.hpp"
#include "ftcc/tensor/storage.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/parallel_grid.hpp"
#include "ftcc/train/pp_strategy.hpp"
#include "ftcc/train/progress_reporter.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/step_breakdown.hpp"
#include "ftcc/train/tp_strategy.hpp"

namespace ftcc::train {
namespace {

namespace fc = ftcc::comm;
using Clock = std::chrono::steady_clock;

// User tags (< comm::Communicator::kMaxUserTag); the strategies use tags below 16.
constexpr int kGatherTag = 16, kScatterTag = 17, kRestoreSizeTag = 18, kRestoreTag = 19, kReplicaSizeTag = 3000,
              kReplicaTag = 3100;

std::string joined(const std::vector<int>& v) {
  std::ostringstream os;
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

class Driver {
 public:
  Driver(const TrainConfig& cfg, recovery::ResilientGroup& g, const StrategyFactory& make)
      : cfg_(cfg), g_(g), t_start_(Clock::now()), cfg_hash_(validated_hash(cfg, g)),
        // A hot spare makes the data alone (it is in no training group yet).
        td_([&] {
          const auto t_data = Clock::now();
          TrainingData td = load_training_data(cfg.dataset, cfg.seed, cfg.held_out, g.is_spare() ? nullptr : &g.comm());
          data_s_ = std::chrono::duration<double>(Clock::now() - t_data).count();
          return td;
        }()),
        widths_(model_widths(cfg.layers, td_, cfg.dataset)),
        s_(make(cfg, widths_, td_)),
        sampler_({.num_samples = td_.train.size(), .global_batch = cfg.batch, .seed = cfg.seed,
                  .micro_batch = std::min(cfg.micro_batch, cfg.batch)}),
        log_(cfg, g, sampler_.steps_per_epoch()),
        model_size_(cfg.model_size(g.is_spare() ? g.initial_size() : g.size())) {
    const int n = g.is_spare() ? g.initial_size() : g.size();
    if (cfg.parallel == Parallel::dp_pp || cfg.parallel == Parallel::dp_tp) {
      const char* flag = cfg.parallel == Parallel::dp_pp ? "--pp-size " : "--tp-size ";
      FTCC_REQUIRE(model_size_ <= n && n % model_size_ == 0)
          << "--parallel " << choice_name(cfg.parallel) << " on " << n << " ranks: " << flag << model_size_
          << " does not divide them (the ranks are replicas x " << flag << "ranks)";
      FTCC_REQUIRE(n / model_size_ <= cfg.batch) << "--parallel " << choice_name(cfg.parallel) << ": " << n / model_size_
                                                 << " replicas need a --batch of at least as many rows, got " << cfg.batch;
      // Each replica needs at least one of the micro-batches it shares with the others.
      FTCC_REQUIRE(!cfg.deterministic || n / model_size_ <= std::min<std::int64_t>(cfg.micro_batches, cfg.batch))
          << "--parallel " << choice_name(cfg.parallel) << " --deterministic: the global batch's --micro-batches ("
          << cfg.micro_batches
          << ") are dealt out whole to the " << n / model_size_
          << " replicas (the same micro-batches on any grid), so each needs one: use --micro-batches "
          << n / model_size_ << " or more";
    }
    s_->validate(model_size_, /*at_start=*/true);
    require_batch_fits(cfg, td_.train.size());
    if (!cfg.checkpoint_dir.empty()) ckpt_ = std::make_unique<CheckpointStore>(cfg.checkpoint_dir, cfg, widths_);
    tensor::host_buffers_release();  // the buffers of the data's preparation will not be asked for again
  }

  TrainSummary run() {
    if (!g_.is_spare()) start();
    if (ckpt_) remove_stale_temporaries(*ckpt_, g_, log_);  // once the start is accepted: a refused run touches nothing
    ProgressReporter report(cfg_, g_, log_);
    g_.add_recovery_hook([&](recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) { recover(grp, ev); });
    // A hot spare waits; once it takes a lost rank's place, the hook above has rebuilt its part
    // from the buddy replicas like any survivor's (its replica store is empty: it holds no copy).
    if (g_.is_spare() && !g_.wait_as_spare()) return TrainSummary{};
    double last_loss = 0;
    FinalMetrics final;
    std::int64_t peak = 0;
    double evaluation_s = 0;
    const double setup_s = std::chrono::duration<double>(Clock::now() - t_start_).count();
    tensor::reset_peak_cpu_tensor_memory();  // the steps' peak: data, model, optimizer, activations
    recovery::run_step_loop(g_, {
        .done = [&] { return done(); },
        .step = [&] { return p_.step; },
        .body = [&] { last_loss = train_step(g_.comm(), report); },
        .after_step = [&] { report.step_done(p_.step, p_.cursor.epoch, last_loss, p_.samples_seen); },
        // The units to rank 0 for the final figures; a failure here is recovered like any other
        // (and the steps after the restored copy are then redone).
        .finish =
            [&] {
              fc::Communicator& c = g_.comm();
              auto& most = *pins_.keep(std::make_shared<std::int64_t>(tensor::cpu_tensor_memory().peak));
              fc::allreduce(c, fc::kInPlace, &most, 1, fc::DType::i64, fc::ReduceOp::max);
              peak = most;
              const auto t_eval = Clock::now();
              gather_full(c);
              final = final_metrics(c, c.rank() == 0 ? full_.model.get() : nullptr, td_.train, td_.test,
                                    td_.classification, cfg_.loss_in_use());
              evaluation_s = std::chrono::duration<double>(Clock::now() - t_eval).count();
            },
        .recovered = [&](const recovery::RecoveryEvent& ev) { report.recovered(ev); }});
    TrainSummary sum = TrainSummary::of_run(cfg_.loss_in_use(), final.train_loss, last_loss, td_.classification, final.eval, p_.step,
                                            p_.cursor.epoch, g_.initial_size(), g_, p_.tally(),
                                            sampler_.expected_tally(p_.cursor), to_hex(final.digest), t_start_);
    sum.step_samples_per_s = report.steady_samples_per_s();
    sum.grid = grid_.describe();
    sum.peak_tensor_bytes = peak;
    sum.step_ms = timer_.to_json();
    // Where the whole run's time went (rank 0's clock), as dp reports it.
    sum.wall_split_s = {{"setup", setup_s}, {"data", data_s_}, {"evaluation", evaluation_s},
                        {"steps", sum.wall_s - setup_s - evaluation_s}};
    if (!cfg_.quiet && model_)  // an idle rank (a spare that found no place in the grid) holds no part
      log_.note(std::string(s_->name()) + ": state " + std::to_string(s_->state_bytes()) +
                " B, replica/snapshot store " + std::to_string(store_.bytes()) + " B on rank 0");
    require_samples_exact(sum);  // every rank alike: a job-level error, not a summary with a false flag
    log_.finish(sum.to_json());
    return sum;
  }

 private:
  static Digest validated_hash(const TrainConfig& cfg, recovery::ResilientGroup& g) {
    cfg.validate();  // refuses what this driver does not support
    FTCC_INVARIANT(cfg.parallel != Parallel::dp) << "train_model_parallel called with --parallel dp";
    return g.respawned() ? config_digest(cfg) : check_same_config(cfg, g.pool(), g.pool_members());
  }

  bool done() const {
    return cfg_.steps > 0 ? p_.step >= cfg_.steps : p_.cursor.epoch >= (cfg_.epochs > 0 ? cfg_.epochs : 10);
  }

  // The full model, on rank 0 only (checkpoints, the final metrics), built when first needed.
  FullModel& full() {
    if (!full_.model) full_ = make_full_model(cfg_, widths_);
    return full_;
  }

  // The grid over c's ranks (train/parallel_grid.hpp) and this rank's communicators in it: its
  // replica's ranks (model_) and, with several replicas or an exact sum, the ranks of its
  // position (dp_). Both are sub-groups of c (comm/subgroup_transport.hpp): a revoke of c reaches
  // them, and they carry c's fault hook (injected faults fire in their collectives too).
  void form_grid(fc::Communicator& c) {
    grid_ = choose_grid(c.size(), model_size_, s_->max_split(), cfg_.batch, cfg_.pipeline() ? cfg_.micro_batches : 0);
    model_.reset();
    dp_.reset();
    const int me = c.rank();
    if (!grid_.is_active(me)) return;
    const auto sub = [&](std::vector<int> members) {
      auto comm = std::make_unique<fc::Communicator>(std::make_unique<fc::SubgroupTransport>(c.transport(), std::move(members)),
                                                     fc::CommOptions{c.timeout_s()});
      if (const fc::FaultHook* h = c.fault_hook()) comm->set_fault_hook(*h);
      return comm;
    };
    model_ = sub(grid_.replica_ranks(grid_.replica_of(me)));
    // The hybrids under --deterministic sum over it with one replica left too (the same exact sum on every grid).
    if (grid_.replicas > 1 || exact_replica_sum()) dp_ = sub(grid_.position_ranks(grid_.position_of(me)));
  }
  // The hybrids under --deterministic: the replicas' sum is exact (a float sum's bits would depend on the grid).
  bool exact_replica_sum() const {
    return cfg_.deterministic && (cfg_.parallel == Parallel::dp_pp || cfg_.parallel == Parallel::dp_tp);
  }
  int position() const { return grid_.position_of(g_.comm().rank()); }

  void start() {
    fc::Communicator& c = g_.comm();
    form_grid(c);
    if (model_) s_->build(grid_.model, position());
    if (!cfg_.resume.empty()) {
      FTCC_REQUIRE(restore_checkpoint(c, cfg_.resume, "--resume"))
          << "--resume '" << cfg_.resume << "': no valid checkpoint found there";
      log_.note("resumed from " + start_path_ + " (step " + std::to_string(p_.step) + ")");
    } else if (!cfg_.init_weights.empty()) {
      load_init_weights_on_rank0(c, cfg_, c.rank() == 0 ? full().model.get() : nullptr);
      scatter_full(c);
      log_.note("initial weights from " + cfg_.init_weights + " (fresh optimizer state)");
    }
    g_.set_committed_step(p_.step - 1);
    replicate();
    pins_.completed();
  }

  // One step; returns the step's loss. Commit point: the allreduce of the loss, the non-finite
  // verdicts and the rows fed, after which every rank takes its optimizer step.
  double train_step(fc::Communicator& c, ProgressReporter& report) {
    // An idle rank holds no part: its copies go once the recovery that made it idle is over (inside
    // the hook they may still be needed by a retry after a further failure).
    timer_.begin_step();
    if (!model_) store_.clear();
    const auto ids = sampler_.batch(p_.cursor);
    timer_.mark(Phase::data);
    StepShare share;
    if (model_) {  // this replica's rows; the gradients summed over the replicas
      const auto B = static_cast<std::int64_t>(ids.size());
      // --deterministic: the global batch's micro-batches, each whole on one replica (pp: the one
      // replica), so each meets the same layers with the same shapes on any grid. pp then sums
      // them in micro-batch order on each stage (tp has one: the whole batch); the hybrids keep
      // each one's gradient apart and sum them exactly over the replicas (train/exact_sum.hpp;
      // dp,tp's scales from whole tensors, not this rank's slices).
      const bool exact = exact_replica_sum();
      const std::int64_t M = cfg_.pipeline() || exact ? cfg_.micro_batches : 1;
      auto mb = grid_.micro_batches_of(grid_.replica_of(c.rank()), B, M, cfg_.deterministic);
      StepWork work{.ids = std::vector<std::int64_t>(ids.begin() + mb.begin, ids.begin() + mb.end),
                    .cuts = std::move(mb.cuts), .global_rows = B, .epoch = p_.cursor.epoch,
                    .parts_of = exact ? &reducer() : nullptr};
      share = s_->step(*model_, work, pins_);
      timer_.mark(Phase::compute);
      if (exact)
        share.gradients_finite = work.parts_of->exact_sum(*dp_, share.parts, std::min(M, B),
                                                          cfg_.parallel == Parallel::dp_tp ? model_.get() : nullptr);
      else if (dp_) share.gradients_finite = sum_over_replicas() && share.gradients_finite;
    }
    auto& sums = *pins_.keep(std::make_shared<std::vector<double>>(2 + data::SampleTally::kDoubles));
    double* stats = sums.data();
    stats[0] = share.loss;
    stats[1] = share.gradients_finite ? 0.0 : 1.0;
    share.fed.to_doubles(stats + 2);
    fc::allreduce(c, fc::kInPlace, stats, sums.size(), fc::DType::f64, fc::ReduceOp::sum);
    require_finite(stats[0], stats[1] == 0.0, p_.step, cfg_);
    const auto tally = data::SampleTally::from_doubles(stats + 2);
    FTCC_INVARIANT(tally.count == static_cast<std::int64_t>(ids.size()))
        << s_->name() << ": step " << p_.step << " fed " << tally.count << " rows, the batch has " << ids.size();
    timer_.mark(Phase::exposed_comm);
    if (model_) s_->apply();
    timer_.mark(Phase::optimizer);
    p_.add(tally);
    report.add_samples(tally.count);
    p_.cursor = sampler_.next(p_.cursor);
    ++p_.step;
    g_.set_committed_step(p_.step - 1);
    timer_.end_step();
    if (p_.step % cfg_.replicate_every == 0) replicate();
    if (ckpt_ && cfg_.checkpoint_every > 0 && p_.step % cfg_.checkpoint_every == 0) {
      gather_full(c);
      if (c.rank() == 0) {
        CheckpointInfo info{p_.step, p_.cursor.epoch, p_.cursor.step, p_.samples_seen, c.size(), cfg_.seed,
                            to_hex(cfg_hash_), ""};
        info.samples_digest = p_.samples_digest;
        log_.checkpoint(p_.step, ckpt_->save(info, *full_.model, *full_.opt, commit_check(g_, p_.step)));
      }
    }
    const double loss = sums[0];
    pins_.completed();  // frees sums too
    return loss;
  }

  // The replicas' gradient sum: dp's reducer (train/gradient_reducer.hpp) over this rank's
  // position in every replica: the gradients in one arena, one allreduce per bucket of
  // --bucket-mb instead of one per tensor (the exact sum: a bucket per tensor, so each tensor's
  // fixed-point scale is its own on any partition of the layers). A reducer belongs to
  // one set of parameters: a stage or shard built anew (a re-partition) gets a new one. It is
  // pinned for the step, as an interrupted allreduce may still write to its arena or its
  // fixed-point sums (Pins).
  GradientReducer& reducer() {
    const nn::NamedTensors& params = s_->params();
    const bool same = reducer_ && reducer_params_.size() == params.size() &&
                      std::equal(params.begin(), params.end(), reducer_params_.begin(),
                                 [](const auto& p, const void* d) { return p.second.data() == d; });
    if (!same) {
      const auto bucket = cfg_.deterministic ? 0 : static_cast<std::size_t>(cfg_.bucket_mb * 1024 * 1024);
      reducer_ = std::make_shared<GradientReducer>(params, bucket);
      reducer_params_.clear();
      for (const auto& [name, t] : params) reducer_params_.push_back(t.data());
    }
    pins_.keep(reducer_);
    return *reducer_;
  }
  // Returns whether the sums are finite.
  bool sum_over_replicas() { return reducer().sum(*dp_); }

  // Snapshot this rank's units at the current step, send them to the next --replicas ranks of its
  // replica (ring) and keep theirs. With several replicas, the other replicas' snapshots of the
  // same units are copies too (--replicas 0 relies on them alone).
  void replicate() {
    recorded_[p_.step] = p_;
    if (model_) {
      fc::Communicator& mc = *model_;
      const int n = mc.size(), me = mc.rank();
      Bytes& mine = *pins_.keep(std::make_shared<Bytes>());
      auto& sizes = *pins_.keep(std::make_shared<std::vector<std::int64_t>>());
      for (const UnitKey& u : s_->units_of(n, me)) {
        Bytes b = s_->pack(u);
        sizes.push_back(static_cast<std::int64_t>(b.size()));
        mine.insert(mine.end(), b.begin(), b.end());
        store_.put(p_.step, u, std::move(b));
      }
      const int k = std::min(cfg_.replicas, n - 1);
      for (int j = 1; j <= k; ++j) {
        const int dst = (me + j) % n, src = (me - j + n) % n;
        const auto theirs = s_->units_of(n, src);
        auto& their_sizes = *pins_.keep(std::make_shared<std::vector<std::int64_t>>(theirs.size()));
        auto s1 = mc.isend(sizes.data(), sizes.size(), fc::DType::i64, dst, kReplicaSizeTag + j);
        auto s2 = isend_bytes(mc, mine, dst, kReplicaTag + j);
        mc.recv(their_sizes.data(), their_sizes.size(), fc::DType::i64, src, kReplicaSizeTag + j);
        std::int64_t total = 0;
        for (auto s : their_sizes) total += s;
        Bytes& payload = pins_.bytes(static_cast<std::size_t>(total));
        recv_bytes(mc, payload, src, kReplicaTag + j);
        s1.wait();
        s2.wait();
        std::size_t off = 0;
        for (std::size_t i = 0; i < theirs.size(); ++i) {
          const auto sz = static_cast<std::size_t>(their_sizes[i]);
          store_.put(p_.step, theirs[i], Bytes(payload.begin() + static_cast<std::ptrdiff_t>(off),
                                               payload.begin() + static_cast<std::ptrdiff_t>(off + sz)));
          off += sz;
        }
      }
    }
    store_.keep_newest(2);
    const std::int64_t oldest = store_.oldest();
    std::erase_if(recorded_, [&](const auto& e) { return oldest >= 0 && e.first < oldest; });
    while (recorded_.size() > 2) recorded_.erase(recorded_.begin());
  }

  // The units of replica 0 (ranks 0..model-1, rank r at position r) into rank 0's full model.
  void gather_full(fc::Communicator& c) {
    const int m = grid_.model;
    if (c.rank() == 0) {
      FullModel& f = full();
      for (int r = 0; r < m; ++r)
        for (const UnitKey& u : s_->units_of(m, r)) {
          if (r == 0) {
            s_->unit_to_full(f, u, s_->pack(u));
            continue;
          }
          Bytes& b = pins_.bytes(s_->full_unit_bytes(f, u));
          recv_bytes(c, b, r, kGatherTag);
          s_->unit_to_full(f, u, b);
        }
    } else if (c.rank() < m) {
      for (const UnitKey& u : s_->units_of(m, c.rank()))
        send_bytes(c, *pins_.keep(std::make_shared<Bytes>(s_->pack(u))), 0, kGatherTag);
    }
  }

  // Rank 0's full model to every active rank, each its position's units.
  void scatter_full(fc::Communicator& c) {
    const int m = grid_.model;
    if (c.rank() == 0) {
      for (int r = 0; r < grid_.active(); ++r)
        for (const UnitKey& u : s_->units_of(m, grid_.position_of(r))) {
          Bytes& b = *pins_.keep(std::make_shared<Bytes>(s_->unit_from_full(full_, u)));
          if (r == 0) s_->unpack(u, b);
          else send_bytes(c, b, r, kScatterTag);
        }
    } else if (model_) {
      for (const UnitKey& u : s_->units_of(m, position())) {
        Bytes& b = pins_.bytes(s_->unit_bytes(u));
        recv_bytes(c, b, 0, kScatterTag);
        s_->unpack(u, b);
      }
    }
  }

  // Rank 0 loads the newest valid checkpoint of `dir`, every rank gets its units and the progress.
  // False when there is none.
  bool restore_checkpoint(fc::Communicator& c, const std::string& dir, const char* flag) {
    if (c.rank() == 0) full();
    auto at = load_checkpoint_on_rank0(c, dir, flag, cfg_, widths_, log_, full_.model.get(), full_.opt.get());
    if (!at) return false;
    scatter_full(c);
    p_ = at->progress;
    start_path_ = at->path;
    return true;
  }

  // The recovery hook: re-form the grid over the survivors (train/parallel_grid.hpp), rebuild
  // every active rank's part at the newest step of which a complete copy survives (or from the
  // newest checkpoint), then refresh the replicas.
  void recover(recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) {
    pins_.abandoned();  // the buffers of the interrupted step (or of an interrupted earlier try)
    fc::Communicator& c = grp.comm();
    form_grid(c);
    const int m = grid_.model;
    s_->validate(m, /*at_start=*/false);
    const auto units_of_first = s_->units_of(m, 0);
    const int units_now = units_of_first.empty() ? 0 : units_of_first.front().of;
    const auto holdings = gather_holdings(c, store_);
    const RestorePlan plan = plan_restore(holdings, units_now);
    const std::string failed = joined(ev.failed);
    const std::string over = " over " + std::to_string(m) + " ranks (" + grid_.describe() + ")";
    if (plan.step >= 0) {
      const auto t_move = Clock::now();
      auto& got = *pins_.keep(std::make_shared<std::int64_t>(0));
      std::map<int, Bytes> units = move_units(c, plan, holdings, got);
      if (!ev.joined.empty()) {  // bytes the restore moved between ranks (newcomers' parts, re-split pieces), summed
        fc::allreduce(c, fc::kInPlace, &got, 1, fc::DType::i64, fc::ReduceOp::sum);
        grp.record_state_transfer(got, std::chrono::duration<double, std::milli>(Clock::now() - t_move).count());
      }
      // The cursor, samples seen and digest recorded at that step (checked equal on every survivor).
      const auto at = recorded_.find(plan.step);
      const TrainProgress restored = agree_progress(c, at == recorded_.end() ? nullptr : &at->second, plan.step);
      if (model_) s_->rebuild(m, position(), plan.of, units);
      store_.drop_after(plan.step);
      recorded_.erase(recorded_.upper_bound(plan.step), recorded_.end());
      p_ = restored;
      log_.note(std::string(s_->name()) + ": lost rank(s) " + failed + "; " + std::to_string(plan.of) + " " +
                s_->regroup_name() + over + " from in-memory copies, rolled back to step " + std::to_string(plan.step));
    } else {
      std::string what = std::string(s_->name()) + ": " + s_->units_name() + " " + joined(plan.lost) +
                         " were held only by the failed rank(s) " + failed + " (own copy and all " +
                         std::to_string(cfg_.replicas) + " buddy replica(s)" +
                         (cfg_.parallel == Parallel::dp_pp || cfg_.parallel == Parallel::dp_tp ? ", in every model replica" : "") +
                         "): no in-memory copy left";
      if (model_) s_->build(m, position());
      if (!ckpt_ || !restore_checkpoint(c, cfg_.checkpoint_dir, "checkpoint")) {
        what += ckpt_ ? "; no valid checkpoint in '" + cfg_.checkpoint_dir + "' to fall back to: training state lost, stopping"
                      : "; no --checkpoint-dir to fall back to: training state lost, stopping";
        log_.note(what);
        throw TrainingStateLost(what);
      }
      store_.clear();
      recorded_.clear();
      log_.note(what + "; FALLING BACK TO CHECKPOINT " + start_path_ + " (step " + std::to_string(p_.step) + ")" + over);
    }
    grp.set_committed_step(p_.step - 1);
    replicate();
  }

  // Whether holdings list (step, key).
  static bool holds(const std::vector<Holding>& h, std::int64_t step, UnitKey key) {
    return std::any_of(h.begin(), h.end(), [&](const Holding& x) { return x.step == step && x.key == key; });
  }

  // Each unit of the plan to every active rank of the new grid that needs it and has no copy of
  // its own (from the plan's holder; sizes first, then the bytes; one tag, so MPI's ordering
  // pairs them). Returns this rank's units; `got` = the bytes it received.
  std::map<int, Bytes> move_units(fc::Communicator& c, const RestorePlan& plan,
                                  const std::vector<std::vector<Holding>>& holdings, std::int64_t& got) {
    const int n = c.size(), me = c.rank();
    std::vector<std::vector<int>> needs(static_cast<std::size_t>(n));
    for (int r = 0; r < grid_.active(); ++r)
      needs[static_cast<std::size_t>(r)] = s_->restore_units(plan.of, grid_.model, grid_.position_of(r));
    const auto source = [&](int u, int r) {
      return holds(holdings[static_cast<std::size_t>(r)], plan.step, {u, plan.of}) ? r : plan.holder[static_cast<std::size_t>(u)];
    };
    std::vector<fc::P2PRequest> sends;
    for (int u = 0; u < plan.of; ++u) {
      if (plan.holder[static_cast<std::size_t>(u)] != me) continue;
      const Bytes& b = *pins_.keep(store_.get(plan.step, {u, plan.of}));
      auto size = pins_.keep(std::make_shared<std::int64_t>(static_cast<std::int64_t>(b.size())));
      for (int r = 0; r < n; ++r) {
        const auto& need = needs[static_cast<std::size_t>(r)];
        if (r == me || source(u, r) != me || std::find(need.begin(), need.end(), u) == need.end()) continue;
        sends.push_back(c.isend(size.get(), 1, fc::DType::i64, r, kRestoreSizeTag));
        sends.push_back(isend_bytes(c, b, r, kRestoreTag));
      }
    }
    std::map<int, Bytes> mine;
    got = 0;
    for (int u : needs[static_cast<std::size_t>(me)]) {
      const int h = source(u, me);
      if (h == me) {
        mine[u] = *store_.get(plan.step, {u, plan.of});
        continue;
      }
      auto size = pins_.keep(std::make_shared<std::int64_t>(0));
      c.recv(size.get(), 1, fc::DType::i64, h, kRestoreSizeTag);
      Bytes& b = pins_.bytes(static_cast<std::size_t>(*size));
      recv_bytes(c, b, h, kRestoreTag);
      mine[u] = b;
      got += static_cast<std::int64_t>(b.size());
    }
    for (auto& r : sends) r.wait();
    return mine;
  }

  const TrainConfig& cfg_;
  recovery::ResilientGroup& g_;
  Clock::time_point t_start_;
  double data_s_ = 0;  // loading and preparing the data (before td_: td_'s initializer sets it)
  Digest cfg_hash_;
  TrainingData td_;
  std::vector<std::int64_t> widths_;
  std::unique_ptr<ModelParallelStrategy> s_;
  data::DistributedSampler sampler_;
  RunLog log_;
  int model_size_;                          // the ranks of one replica the user asked for
  ParallelGrid grid_;
  std::unique_ptr<fc::Communicator> model_;  // this rank's replica (null on an idle rank)
  std::unique_ptr<fc::Communicator> dp_;     // this rank's position in every replica (see form_grid)
  std::shared_ptr<GradientReducer> reducer_;  // the replicas' gradient sum (with dp_), for these parameters:
  std::vector<const void*> reducer_params_;   // their data (the reducer holds them: no address reuse)
  std::unique_ptr<CheckpointStore> ckpt_;
  TrainProgress p_;
  std::map<std::int64_t, TrainProgress> recorded_;  // the progress at each step the store holds
  ReplicaStore store_;
  StepBreakdown timer_;  // rank 0's phases per step, for the summary's step_ms
  Pins pins_;
  FullModel full_;  // rank 0 only
  std::string start_path_;
};

}  // namespace

TrainSummary train_model_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group, const StrategyFactory& make) {
  return Driver(cfg, group, make).run();
}

TrainSummary train_pipeline_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group) {
  FTCC_INVARIANT(cfg.pipeline()) << "train_pipeline_parallel called with --parallel " << choice_name(cfg.parallel);
  return train_model_parallel(cfg, group, make_pipeline_strategy);
}

TrainSummary train_tensor_parallel(const TrainConfig& cfg, recovery::ResilientGroup& group) {
  FTCC_INVARIANT(cfg.tensor_parallel()) << "train_tensor_parallel called with --parallel " << choice_name(cfg.parallel);
  return train_model_parallel(cfg, group, make_tensor_strategy);
}

}  // namespace ftcc::train
