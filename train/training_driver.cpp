#include "ftcc/train/training_driver.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <span>
#include <thread>

#include "ftcc/base/error.hpp"
#include "ftcc_config.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/subgroup_transport.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/recovery/step_loop.hpp"
#include "ftcc/tensor/host_buffers.hpp"
#include "ftcc/tensor/storage.hpp"
#include "ftcc/tensor/cuda/backend.hpp"
#include "ftcc/train/gpu_choice.hpp"
#include "ftcc/train/checkpoint_store.hpp"
#include "ftcc/train/dp_strategy.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/parallel_grid.hpp"
#include "ftcc/train/pp_strategy.hpp"
#include "ftcc/train/progress_reporter.hpp"
#include "ftcc/train/bit_flip.hpp"
#include "ftcc/train/replica_verifier.hpp"
#include "ftcc/train/state_at_rest.hpp"
#include "ftcc/train/straggler_watch.hpp"
#include "ftcc/train/verdict_exchange.hpp"
#include "ftcc/train/rank_list.hpp"
#include "ftcc/train/reduction_report.hpp"
#include "ftcc/train/wire_flip.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/state_hash.hpp"
#include "ftcc/train/step_breakdown.hpp"
#include "ftcc/train/tp_strategy.hpp"

namespace ftcc::train {
namespace {

namespace fc = ftcc::comm;
using Clock = std::chrono::steady_clock;

// User tags (< comm::Communicator::kMaxUserTag); the strategies use tags below 16.
constexpr int kGatherTag = 16, kScatterTag = 17, kRestoreSizeTag = 18, kRestoreTag = 19, kReplicaSizeTag = 3000,
              kReplicaTag = 3100;

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
        global_batch_(cfg.batch),
        sampler_(make_sampler(cfg.batch)),
        log_(cfg, g, sampler_->steps_per_epoch()),
        model_size_(cfg.model_size(g.is_spare() ? g.initial_size() : g.size())) {
    check_grid_flags(g.is_spare() ? g.initial_size() : g.size());
    s_->validate(model_size_, /*at_start=*/true);
    require_batch_fits(cfg, td_.train.size());
    if (!cfg.checkpoint_dir.empty()) ckpt_ = std::make_unique<CheckpointStore>(cfg.checkpoint_dir, cfg, widths_);
    tensor::host_buffers_release();  // the buffers of the data's preparation will not be asked for again
  }

  TrainSummary run() {
    // Rank 0 binds its metrics server first: a refusal (the port taken) then reaches the others
    // in the start's collectives, not as a failure in their first step.
    ProgressReporter report(cfg_, g_, log_);
    if (!g_.is_spare()) start();
    if (ckpt_) remove_stale_temporaries(*ckpt_, g_, log_);  // once the start is accepted: a refused run touches nothing
    report_ = &report;
    g_.add_recovery_hook([&](recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) { recover(grp, ev); });
    // A hot spare waits; once it takes a lost rank's place, the hook above has rebuilt its part
    // from the survivors' copies like any survivor's (its replica store is empty: it holds no copy).
    // Where every part is the whole model (dp) it builds that part now, so that the heal only
    // writes the state into it (it is no copy of anything until then: built_ stays empty).
    if (g_.is_spare() && s_->max_split() == 1) {
      s_->build(1, 0);
      reducer();  // and the gradient arena
      warm_buffer_ = std::make_shared<Bytes>(s_->state_bytes());  // and the bytes the heal receives into
    }
    if (g_.is_spare() && !g_.wait_as_spare()) return TrainSummary{};
    double last_loss = 0;
    Figures fig;
    fig.setup_s = std::chrono::duration<double>(Clock::now() - t_start_).count();
    tensor::reset_peak_cpu_tensor_memory();  // the steps' peak: data, model, optimizer, activations
    recovery::run_step_loop(g_, {
        .done = [&] { return done(); },
        .step = [&] { return p_.step; },
        .body = [&] { last_loss = train_step(g_.comm(), report); },
        .after_step = [&] { report.step_done(p_.step, p_.cursor.epoch, last_loss, p_.samples_seen); },
        // A failure here is recovered like any other (and the steps after the restored copy redone).
        .finish = [&] { final_figures(g_.comm(), fig); },
        .recovered = [&](const recovery::RecoveryEvent& ev) { report.recovered(ev); }});
    TrainSummary sum = TrainSummary::of_run(cfg_.loss_in_use(), fig.metrics.train_loss, last_loss, td_.classification,
                                            fig.metrics.eval, p_.step, p_.cursor.epoch, g_.initial_size(), g_,
                                            p_.tally(), sampler_->expected_tally(p_.cursor),
                                            to_hex(fig.metrics.digest), t_start_);
    sum.step_samples_per_s = report.steady_samples_per_s();
    sum.grid = describe_grid();
    sum.device = choice_name(cfg_.device);
    sum.peak_tensor_bytes = fig.peak;
    sum.step_ms = timer_.to_json();
    // Where the whole run's time went (rank 0's clock).
    sum.wall_split_s = {{"setup", fig.setup_s}, {"data", data_s_}, {"evaluation", fig.evaluation_s},
                        {"steps", sum.wall_s - fig.setup_s - fig.evaluation_s}};
    if (!cfg_.quiet && model_ && grid_.model > 1)  // an idle rank (a spare that found no place in the grid) holds no part
      log_.note(std::string(s_->name()) + ": state " + std::to_string(s_->state_bytes()) +
                " B, replica/snapshot store " + std::to_string(store_.bytes()) + " B on rank 0");
    require_samples_exact(sum);  // every rank alike: a job-level error, not a summary with a false flag
    log_.finish(sum.to_json());
    return sum;
  }

 private:
  // The end of the run: the steps' peak tensor memory (the largest over the ranks), the final
  // figures and how long they took.
  struct Figures {
    FinalMetrics metrics;
    std::int64_t peak = 0;
    double setup_s = 0, evaluation_s = 0;
  };
  // When every rank holds the whole model (dp), every rank evaluates its share of the data on its
  // device, and the digest is of its parameters (the same on every rank, checked at each start and
  // recovery); otherwise the units go to rank 0, which computes the figures.
  void final_figures(fc::Communicator& c, Figures& fig) {
    auto& most = *pins_.keep(std::make_shared<std::int64_t>(tensor::cpu_tensor_memory().peak));
    fc::allreduce(c, fc::kInPlace, &most, 1, fc::DType::i64, fc::ReduceOp::max);
    fig.peak = most;
    const auto t_eval = Clock::now();
    if (nn::Module* whole = model_ ? s_->whole_model() : nullptr; whole && grid_.active() == c.size()) {
      const EvalFigures e = evaluate_split(c, *whole, td_.train, td_.test, td_.classification, cfg_.loss_in_use(),
                                           cfg_.device);
      fig.metrics = {e.train_loss, e.eval, sha256_of(s_->params())};
    } else {
      gather_full(c);
      fig.metrics = final_metrics(c, c.rank() == 0 ? full_.model.get() : nullptr, td_.train, td_.test,
                                  td_.classification, cfg_.loss_in_use());
    }
    fig.evaluation_s = std::chrono::duration<double>(Clock::now() - t_eval).count();
  }

  // dp: "4 ranks" (every rank a replica); otherwise the grid's "2 replicas x 2 ranks".
  std::string describe_grid() const {
    if (cfg_.parallel != Parallel::dp) return grid_.describe();
    const int idle = grid_.ranks - grid_.active();
    return std::to_string(grid_.active()) + (grid_.active() == 1 ? " rank" : " ranks") +
           (idle > 0 ? ", " + std::to_string(idle) + " idle" : "");
  }

  // Refuses what a mode does not support and ranks started with different configurations (they
  // would train different models; the hot spares too: one of them may train later).
  static Digest validated_hash(const TrainConfig& cfg, recovery::ResilientGroup& g) {
    cfg.validate();
    FTCC_REQUIRE(cfg.device == tensor::Device::CPU || tensor::cuda_available())
        << "--device cuda: no usable CUDA device here (this build "
        << (FTCC_HAVE_CUDA ? "has CUDA kernels, but no GPU or driver was found: " + tensor::cuda::backend_origin()
                           : std::string("was built without CUDA"))
        << "); use --device cpu";
    if (cfg.device == tensor::Device::CUDA) use_this_ranks_gpu(g);
    return g.respawned() ? config_digest(cfg) : check_same_config(cfg, g.pool(), g.pool_members());
  }

  // One GPU per rank of a host, in turn (train/gpu_choice.hpp), before any CUDA tensor is made.
  static void use_this_ranks_gpu(const recovery::ResilientGroup& g) {
    const auto& pool = g.pool_members();
    const int originals = std::max(*std::max_element(pool.begin(), pool.end()), g.original_rank()) + 1;
    std::vector<std::string> host_of;
    for (int r = 0; r < originals; ++r) host_of.push_back(g.peer(r).host_id);
    tensor::set_cuda_device(gpu_for_rank(host_of, g.original_rank(), tensor::cuda_device_count()));
  }

  // The hybrids' grid flags against the ranks the job starts with.
  void check_grid_flags(int n) const {
    if (cfg_.parallel != Parallel::dp_pp && cfg_.parallel != Parallel::dp_tp) return;
    const char* mode = choice_name(cfg_.parallel);
    const char* flag = cfg_.parallel == Parallel::dp_pp ? "--pp-size " : "--tp-size ";
    const int replicas = n / model_size_;
    FTCC_REQUIRE(model_size_ <= n && n % model_size_ == 0)
        << "--parallel " << mode << " on " << n << " ranks: " << flag << model_size_
        << " does not divide them (the ranks are replicas x " << flag << "ranks)";
    FTCC_REQUIRE(replicas <= cfg_.batch) << "--parallel " << mode << ": " << replicas
                                         << " replicas need a --batch of at least as many rows, got " << cfg_.batch;
    // Each replica needs at least one of the micro-batches it shares with the others.
    FTCC_REQUIRE(!cfg_.deterministic || replicas <= std::min<std::int64_t>(cfg_.micro_batches, cfg_.batch))
        << "--parallel " << mode << " --deterministic: the global batch's --micro-batches (" << cfg_.micro_batches
        << ") are dealt out whole to the " << replicas
        << " replicas (the same micro-batches on any grid), so each needs one: use --micro-batches " << replicas
        << " or more";
  }

  std::unique_ptr<data::DistributedSampler> make_sampler(std::int64_t batch) const {
    return std::make_unique<data::DistributedSampler>(
        data::SamplerOptions{.num_samples = td_.train.size(), .global_batch = batch, .seed = cfg_.seed,
                             .micro_batch = std::min(cfg_.micro_batch, batch)});
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
    if (!grid_.is_active(me)) {
      built_.reset();  // an idle rank's part stops training: no longer a copy of anything
      return;
    }
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
  // dp and the hybrids under --deterministic: the replicas' sum is exact (a float sum's bits would
  // depend on the grid).
  bool exact_replica_sum() const { return cfg_.deterministic && cfg_.parallel != Parallel::pp && cfg_.parallel != Parallel::tp; }
  // The micro-batches of a global batch of B rows: pp's and the exact sum's --micro-batches (dp:
  // one per --micro-batch rows), otherwise one per replica.
  std::int64_t micro_batches(std::int64_t B) const {
    if (cfg_.parallel == Parallel::dp) {
      const std::int64_t mb = std::min(cfg_.micro_batch, B);
      return exact_replica_sum() ? (B + mb - 1) / mb : 1;
    }
    return cfg_.pipeline() || exact_replica_sum() ? cfg_.micro_batches : 1;
  }
  void build(int n, int r) {
    s_->build(n, r);
    built_ = {n, r};
  }
  int position() const { return grid_.position_of(g_.comm().rank()); }

  void start() {
    fc::Communicator& c = g_.comm();
    form_grid(c);
    if (model_) build(grid_.model, position());
    if (!cfg_.resume.empty()) {
      FTCC_REQUIRE(restore_checkpoint(c, cfg_.resume, "--resume"))
          << "--resume '" << cfg_.resume << "': no valid checkpoint found there";
      log_.note("resumed from " + start_path_ + " (step " + std::to_string(p_.step) + ")");
    } else if (!cfg_.init_weights.empty()) {
      load_init_weights_on_rank0(c, cfg_, c.rank() == 0 ? full().model.get() : nullptr);
      scatter_full(c);
      log_.note("initial weights from " + cfg_.init_weights + " (fresh optimizer state)");
    }
    require_same_replicas("initial parameters differ between ranks");
    if (dp_) reducer();  // its arena now, not inside the first step (the steps' peak memory)
    live_valid_ = true;
    if (const ReplicaVerdict v = check_replicas(c).verdict; !v.clean())
      throw ftcc::Error("the replicas' parameters or optimizer state differ at the start (" + describe(v) + ")");
    g_.set_committed_step(p_.step - 1);
    replicate();
    seal_rest();
    pins_.completed();
  }

  // Every replica of a position holds the same parameters (compared by SHA-256 over its ranks).
  void require_same_replicas(const char* what) {
    if (!dp_) return;
    if (auto bad = ranks_differing(*dp_, sha256_of(s_->params())); !bad.empty())
      throw ftcc::Error(std::string(what) + " (rank " + std::to_string(grid_.position_ranks(position())[static_cast<std::size_t>(bad[0])]) + ")");
  }

  // One step; returns the step's loss. Commit point: the allreduce of the loss, the non-finite
  // verdicts and the rows fed, after which every rank takes its optimizer step.
  double train_step(fc::Communicator& c, ProgressReporter& report) {
    // An idle rank holds no part: its copies go once the recovery that made it idle is over (inside
    // the hook they may still be needed by a retry after a further failure).
    timer_.begin_step();
    check_rest("its next step");
    if (!model_) store_.clear();
    // --on-failure keep-local-batch: a new global batch from an epoch's start on (the epoch in
    // flight keeps its split, so each of its rows is still fed once).
    if (p_.cursor.step == 0 && sampler_->options().global_batch != global_batch_) sampler_ = make_sampler(global_batch_);
    const auto ids = sampler_->batch(p_.cursor);
    timer_.mark(Phase::data);
    const double slept = inject_slowness();
    const StepShare share = model_ ? compute(c, ids) : StepShare{};
    const double loss = commit(c, share, static_cast<std::int64_t>(ids.size()), report);
    const bool checkpoint = ckpt_ && cfg_.checkpoint_every > 0 && p_.step % cfg_.checkpoint_every == 0;
    // A checkpoint is written only from verified state.
    const bool verify = cfg_.verify_every > 0 && grid_.active() > 1 && (p_.step % cfg_.verify_every == 0 || (checkpoint && verifying()));
    const bool copy = p_.step % cfg_.replicate_every == 0;  // buddy copies where a model replica has 2+ ranks
    if (verify || (copy && grid_.model > 1) || checkpoint)
      check_rest(checkpoint ? "a checkpoint" : verify ? "a verification" : "a buddy copy");
    if (verify) verify_step(c);
    if (copy) replicate();
    own_ms_ += timer_.own_ms();
    ++own_steps_;
    last_own_ms_ = timer_.own_ms() - slept;
    timer_.end_step();  // a checkpoint's write is not part of the step
    if (checkpoint) {
      gather_full(c);
      if (c.rank() == 0) {
        const CheckpointInfo info{p_, c.size(), cfg_.seed, to_hex(cfg_hash_), ""};
        log_.checkpoint(p_.step, ckpt_->save(info, *full_.model, *full_.opt, commit_check(g_, p_.step)));
      }
    }
    pins_.completed();
    return loss;
  }

  // This replica's step on its rows of the global batch `ids`, and its gradients summed over the
  // replicas. --deterministic: the global batch's micro-batches, each whole on one replica, so
  // each meets the same layers with the same shapes on any grid; pp then sums them in micro-batch
  // order on each stage (tp has one: the whole batch); dp and the hybrids keep each one's gradient
  // apart and sum them exactly over the replicas (train/exact_sum.hpp; dp,tp's scales from whole
  // tensors, not this rank's slices). Otherwise dp overlaps the sum with its backward (CPU).
  StepShare compute(fc::Communicator& c, const std::vector<std::int64_t>& ids) {
    const auto B = static_cast<std::int64_t>(ids.size());
    const bool exact = exact_replica_sum();
    const std::int64_t M = micro_batches(B);
    auto mb = grid_.micro_batches_of(grid_.replica_of(c.rank()), B, M, cfg_.deterministic);
    // Made before the first backward, so every step's gradients are computed in its arena.
    GradientReducer* sum = dp_ ? &reducer() : nullptr;
    StepWork work{.ids = std::vector<std::int64_t>(ids.begin() + mb.begin, ids.begin() + mb.end),
                  .cuts = std::move(mb.cuts), .global_rows = B, .epoch = p_.cursor.epoch,
                  .parts_of = exact ? sum : nullptr, .timer = &timer_};
    const bool overlap = sum && !exact && cfg_.overlap && cfg_.device == Device::CPU && s_->one_backward();
    // The wireflip fault reaches this step's sum only: from the overlapped buckets' start, else
    // from the sum's (not tp's own allreduces in the step); disarmed when the sum ends or throws.
    const WireFlip::Armed wire(wire_, overlap ? p_.step : -1);
    if (overlap) sum->begin_overlap(*dp_);
    StepShare share = s_->step(*model_, work, pins_);
    if (!share.timed) timer_.mark(Phase::compute);
    if (sum) wire_.arm(p_.step);
    bool finite = true;
    if (exact)
      finite = sum->exact_sum(*dp_, share.parts, std::min(M, B), cfg_.parallel == Parallel::dp_tp ? model_.get() : nullptr);
    else if (overlap) finite = sum->finish_overlap();
    else if (sum) finite = sum->sum(*dp_);
    if (sum) act_on_reduction_check(c, *sum);
    share.gradients_finite = finite && share.gradients_finite;
    return share;
  }

  // --verify-reductions: what the audit of the replicas' gradient sum found (train/reduction_report.hpp
  // decides, the same on every rank of the sum). A sum right when repeated is used; otherwise the
  // rank the link probe names leaves (like an outvoted replica) and the others wait for it in a
  // barrier of the sum's group, which fails when it is gone: the recovery that follows redoes the
  // step (nothing of it was applied). Nobody revokes first: a revoke could cut the suspect's own
  // audit short, and it would stay. With no single rank named, the job stops.
  void act_on_reduction_check(fc::Communicator& c, const GradientReducer& sum) {
    if (!sum.last_check().mismatch) return;
    std::vector<int> original_of;
    for (int r : grid_.position_ranks(grid_.position_of(c.rank()))) original_of.push_back(g_.members()[static_cast<std::size_t>(r)]);
    const ReductionOutcome o = judge_reduction(sum.last_check(), p_.step, original_of);
    report_->reduction_mismatch();
    int writer = -1;  // the lowest rank of the sum that stays
    for (int r : original_of)
      if (r != o.excluded && (writer < 0 || r < writer)) writer = r;
    log_.corruption_found(o.event, o.line, g_.original_rank() == writer);
    switch (o.action) {
      case ReductionOutcome::Action::go_on: return;
      case ReductionOutcome::Action::exclude:
        if (o.excluded == g_.original_rank()) g_.leave_excluded(o.why);
        fc::barrier(*dp_);  // throws ProcessFailed once the excluded rank is gone
        FTCC_INVARIANT(false) << "reduction check: rank " << o.excluded << " was to leave, and the barrier completed";
        return;
      case ReductionOutcome::Action::stop: throw ftcc::Error(o.line);
    }
  }

  // The commit: one allreduce of the loss, the non-finite verdicts and the rows fed, so every rank
  // decides alike; then the optimizer step and the new position. Returns the step's loss.
  double commit(fc::Communicator& c, const StepShare& share, std::int64_t rows, ProgressReporter& report) {
    auto& sums = *pins_.keep(std::make_shared<std::vector<double>>(2 + data::SampleTally::kDoubles));
    double* stats = sums.data();
    stats[0] = share.loss;
    stats[1] = share.gradients_finite ? 0.0 : 1.0;
    share.fed.to_doubles(stats + 2);
    fc::allreduce(c, fc::kInPlace, stats, sums.size(), fc::DType::f64, fc::ReduceOp::sum);
    require_finite(stats[0], stats[1] == 0.0, p_.step, cfg_);
    const auto tally = data::SampleTally::from_doubles(stats + 2);
    FTCC_INVARIANT(tally.count == rows) << s_->name() << ": step " << p_.step << " fed " << tally.count
                                        << " rows, the batch has " << rows;
    timer_.mark(Phase::exposed_comm);
    inject_bitflips(/*after_apply=*/false);
    if (model_) s_->apply();
    if (guarding_rest()) {
      timer_.mark(Phase::optimizer);
      seal_rest();
      timer_.mark(Phase::at_rest);
    }
    inject_bitflips(/*after_apply=*/true);
    timer_.mark(Phase::optimizer);
    p_.add(tally);
    report.add_samples(tally.count);
    p_.cursor = sampler_->next(p_.cursor);
    ++p_.step;
    g_.set_committed_step(p_.step - 1);
    return stats[0];
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
      reducer_->set_verify(cfg_.verify_reductions);
      reducer_params_.clear();
      for (const auto& [name, t] : params) reducer_params_.push_back(t.data());
    }
    pins_.keep(reducer_);
    return *reducer_;
  }

  // Snapshot this rank's units at the current step, send them to the next --replicas ranks of its
  // replica (ring) and keep theirs. With several replicas, the other replicas' snapshots of the
  // same units are copies too (--replicas 0 relies on them alone). Each unit travels as a message
  // of its own, sent from the bytes the store keeps and received into the bytes it will keep: the
  // packing is the only copy this side of MPI.
  void replicate() {
    recorded_[p_.step] = p_;
    if (grid_.model == 1) {  // every active rank holds whole models: its live state is the copy (offer_live_units)
      store_.clear();
      while (recorded_.size() > 1) recorded_.erase(recorded_.begin());
      return;
    }
    if (model_) {
      fc::Communicator& mc = *model_;
      const int n = mc.size(), me = mc.rank();
      auto& sizes = *pins_.keep(std::make_shared<std::vector<std::int64_t>>());
      std::vector<std::shared_ptr<Bytes>> mine;
      for (const UnitKey& u : s_->units_of(n, me)) {
        mine.push_back(pins_.keep(std::make_shared<Bytes>(s_->pack(u))));
        sizes.push_back(static_cast<std::int64_t>(mine.back()->size()));
        store_.put(p_.step, u, mine.back());
      }
      const int k = std::min(cfg_.replicas, n - 1);
      for (int j = 1; j <= k; ++j) {
        const int dst = (me + j) % n, src = (me - j + n) % n;
        const auto theirs = s_->units_of(n, src);
        auto& their_sizes = *pins_.keep(std::make_shared<std::vector<std::int64_t>>(theirs.size()));
        std::vector<fc::P2PRequest> sends;
        sends.push_back(mc.isend(sizes.data(), sizes.size(), fc::DType::i64, dst, kReplicaSizeTag + j));
        for (const auto& b : mine) sends.push_back(isend_bytes(mc, *b, dst, kReplicaTag + j));
        mc.recv(their_sizes.data(), their_sizes.size(), fc::DType::i64, src, kReplicaSizeTag + j);
        std::vector<std::shared_ptr<Bytes>> got;
        std::vector<fc::P2PRequest> recvs;
        for (const std::int64_t size : their_sizes) {
          got.push_back(pins_.keep(std::make_shared<Bytes>(static_cast<std::size_t>(size))));
          recvs.push_back(irecv_bytes(mc, *got.back(), src, kReplicaTag + j));  // in order: MPI does not reorder
        }
        for (auto& r : recvs) r.wait();
        for (auto& r : sends) r.wait();
        for (std::size_t i = 0; i < theirs.size(); ++i) store_.put(p_.step, theirs[i], got[i]);
      }
      timer_.mark(Phase::snapshot);
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
  // newest checkpoint), check that the replicas agree, then refresh the copies.
  void recover(recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev) {
    pins_.abandoned();  // the buffers of the interrupted step (or of an interrupted earlier try)
    fc::Communicator& c = grp.comm();
    rest_.unseal();  // the restore below rewrites the state; sealed again at the end
    settle_verdict(grp);
    offer_live_units();
    form_grid(c);
    s_->validate(grid_.model, /*at_start=*/false);
    const auto units_of_first = s_->units_of(grid_.model, 0);
    const int units_now = units_of_first.empty() ? 0 : units_of_first.front().of;
    const auto holdings = gather_holdings(c, store_);
    const RestorePlan plan = plan_restore(holdings, units_now);
    if (plan.step >= 0) restore_copies(grp, ev, plan, holdings);
    else fall_back_to_checkpoint(c, ev, plan);
    // With verification the check at the end of this hook compares them (and settles a mismatch).
    if (!verifying()) require_same_replicas("parameters differ between survivors after recovery");
    if (cfg_.on_failure == OnFailure::keep_local_batch)  // from the next epoch on (train_step)
      global_batch_ = std::max<std::int64_t>(1, cfg_.batch * grp.size() / g_.initial_size());
    store_.drop_unmade();  // the next step changes the live state
    if (dp_) reducer();
    grp.set_committed_step(p_.step - 1);
    own_ms_ = 0;  // the steps' times and the streaks start again on the new group (on every rank
    own_steps_ = 0;  // alike: a newcomer has none)
    watch_ = StragglerWatch(cfg_.straggler_factor, cfg_.straggler_window);  // (predicted_ms_ stays: said at the next check)
    if (ReplicaVerdict v = check_replicas(c).verdict; !v.clean()) {  // settled by a new try of this recovery
      // Parts just copied from one holder to others are no independent votes (a corrupted holder
      // would outvote a healthy rank): here nobody is excluded, everyone rolls back.
      v.undecided += static_cast<int>(v.odd.size());
      v.odd.clear();
      remember_verdict(v);
      throw fc::FaultDetected("replica verification", "after recovery: " + describe(v));
    }
    replicate();
    seal_rest();
  }

  // This rank's live units are a copy at its committed step (the optimizer step follows the
  // commit with no communication in between, so no failure falls between them): the newest copy
  // there is when the store holds none of that step (dp, a grid of whole models, --replicate-every
  // > 1: the restore then rolls forward to the most advanced survivor, not back).
  void offer_live_units() {
    if (!built_ || !live_valid_) return;
    recorded_[p_.step] = p_;
    for (const UnitKey& u : s_->units_of(built_->first, built_->second))  // packed only if the plan picks it
      if (!store_.has(p_.step, u)) store_.put_lazy(p_.step, u, [this, u] { return s_->pack(u); });
  }

  // The plan's units to the ranks that need them, the position recorded at its step, the rebuild.
  void restore_copies(recovery::ResilientGroup& grp, const recovery::RecoveryEvent& ev, const RestorePlan& plan,
                      const std::vector<std::vector<Holding>>& holdings) {
    fc::Communicator& c = grp.comm();
    const auto t_move = Clock::now();
    // A rank whose part already holds the plan's step, for the same split, keeps it (dp's
    // survivors at the newest step: most recoveries); its units then come from nobody.
    const bool keeps = model_ && built_ == std::pair{grid_.model, position()} && live_valid_ && p_.step == plan.step;
    auto& got = *pins_.keep(std::make_shared<std::int64_t>(0));
    const UnitBytes units = move_units(c, plan, holdings, keeps, got);
    if (!ev.joined.empty() || ev.committed_min != ev.committed_max) {  // bytes moved between ranks, summed
      fc::allreduce(c, fc::kInPlace, &got, 1, fc::DType::i64, fc::ReduceOp::sum);
      grp.record_state_transfer(got, std::chrono::duration<double, std::milli>(Clock::now() - t_move).count());
    }
    // The cursor, samples seen and digest recorded at that step (checked equal on every survivor).
    const auto at = recorded_.find(plan.step);
    const TrainProgress restored = agree_progress(c, at == recorded_.end() ? nullptr : &at->second, plan.step);
    if (model_ && !keeps) {
      store_.drop_unmade();  // the live state changes now
      s_->rebuild(grid_.model, position(), plan.of, units);
      built_ = {grid_.model, position()};
    }
    store_.drop_after(plan.step);
    recorded_.erase(recorded_.upper_bound(plan.step), recorded_.end());
    const std::int64_t was = p_.step;
    p_ = restored;
    live_valid_ = true;  // a spare or a respawned process too, from now on
    const std::string to = (plan.step < was ? "rolled back to step " : plan.step > was ? "rolled forward to step "
                                                                                       : "at step ") +
                           std::to_string(plan.step);
    const std::string lost = std::string(s_->name()) + ": " +
                             (ev.failed.empty() ? std::string("no rank lost") : "lost rank(s) " + joined(ev.failed)) + "; ";
    if (cfg_.parallel == Parallel::dp)
      log_.note(lost + "the model on " + describe_grid() + " from the survivors' state, " + to);
    else
      log_.note(lost + std::to_string(plan.of) + " " + s_->regroup_name() + over_grid() + " from in-memory copies, " + to);
  }

  // No complete copy survived: the newest checkpoint of --checkpoint-dir, or TrainingStateLost.
  void fall_back_to_checkpoint(fc::Communicator& c, const recovery::RecoveryEvent& ev, const RestorePlan& plan) {
    // The ranks whose state is gone: the failed ones, or with none failed those whose state was
    // dropped as changed at rest (or by a replica verdict).
    const std::string whose = ev.failed.empty() ? "rank(s) whose state was dropped (silent data corruption)"
                                                : "the failed rank(s) " + joined(ev.failed);
    std::string what =
        cfg_.parallel == Parallel::dp
            ? "dp: the model was held only by " + whose + ": no in-memory copy left"
            : std::string(s_->name()) + ": " + s_->units_name() + " " + joined(plan.lost) +
                  " were held only by " + whose + " (own copy and all " +
                  std::to_string(cfg_.replicas) + " buddy replica(s)" +
                  (cfg_.parallel == Parallel::dp_pp || cfg_.parallel == Parallel::dp_tp ? ", in every model replica" : "") +
                  "): no in-memory copy left";
    live_valid_ = false;  // until the checkpoint's state is in
    store_.drop_unmade();
    if (model_) build(grid_.model, position());
    if (!ckpt_ || !restore_checkpoint(c, cfg_.checkpoint_dir, "checkpoint")) {
      what += ckpt_ ? "; no valid checkpoint in '" + cfg_.checkpoint_dir + "' to fall back to: training state lost, stopping"
                    : "; no --checkpoint-dir to fall back to: training state lost, stopping";
      log_.note(what);
      throw TrainingStateLost(what);
    }
    live_valid_ = true;
    store_.clear();
    recorded_.clear();
    log_.note(what + "; FALLING BACK TO CHECKPOINT " + start_path_ + " (step " + std::to_string(p_.step) + ")" +
              over_grid());
  }

  std::string over_grid() const {
    return " over " + std::to_string(grid_.model) + " ranks (" + grid_.describe() + ")";
  }

  // Whether holdings list (step, key).
  static bool holds(const std::vector<Holding>& h, std::int64_t step, UnitKey key) {
    return std::any_of(h.begin(), h.end(), [&](const Holding& x) { return x.step == step && x.key == key; });
  }

  // Each unit of the plan to every active rank of the new grid that needs it and has no copy of
  // its own, from the plan's holder: first the count of its pieces and their sizes, then the
  // pieces (one tag each for sizes and bytes, so MPI's ordering pairs them). A holder whose copy
  // is its live state (dp: the whole model, not packed yet) sends straight from its tensors, one
  // piece per tensor (ParallelStrategy::unit_views); a packed copy is one piece. The receiver
  // takes the pieces into one buffer, in order: the packed unit. Returns this rank's units (none
  // when it keeps its part: `keeps`; otherwise views of its store's copies and of the pinned
  // buffers it received into, both alive until the recovery ends); `got` = the bytes it received.
  UnitBytes move_units(fc::Communicator& c, const RestorePlan& plan, const std::vector<std::vector<Holding>>& holdings,
                       bool keeps, std::int64_t& got) {
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
      const UnitKey key{u, plan.of};
      std::vector<std::span<const std::byte>> pieces;  // read only when some rank needs it from here
      std::shared_ptr<std::vector<std::int64_t>> count, sizes;
      for (int r = 0; r < n; ++r) {
        const auto& need = needs[static_cast<std::size_t>(r)];
        if (r == me || source(u, r) != me || std::find(need.begin(), need.end(), u) == need.end()) continue;
        if (!count) {
          if (!store_.made(plan.step, key)) pieces = s_->unit_views(key);  // the live state, unpacked
          if (pieces.empty()) pieces.emplace_back(*pins_.keep(store_.get(plan.step, key)));
          sizes = pins_.keep(std::make_shared<std::vector<std::int64_t>>());
          for (const auto& p : pieces) sizes->push_back(static_cast<std::int64_t>(p.size()));
          count = pins_.keep(std::make_shared<std::vector<std::int64_t>>(1, static_cast<std::int64_t>(pieces.size())));
        }
        sends.push_back(c.isend(count->data(), 1, fc::DType::i64, r, kRestoreSizeTag));
        sends.push_back(c.isend(sizes->data(), sizes->size(), fc::DType::i64, r, kRestoreSizeTag));
        for (const auto& p : pieces) sends.push_back(isend_bytes(c, p, r, kRestoreTag));
      }
    }
    UnitBytes mine;
    got = 0;
    std::vector<fc::P2PRequest> recvs;
    for (int u : needs[static_cast<std::size_t>(me)]) {
      const int h = source(u, me);
      if (h == me) {  // a view of this rank's copy (the store keeps it until after the rebuild)
        if (!keeps) mine[u] = *store_.get(plan.step, {u, plan.of});
        continue;
      }
      auto count = pins_.keep(std::make_shared<std::int64_t>(0));
      c.recv(count.get(), 1, fc::DType::i64, h, kRestoreSizeTag);
      FTCC_INVARIANT(*count >= 1) << "restore: unit " << u << " announced in " << *count << " pieces";
      auto& sizes = *pins_.keep(std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(*count)));
      c.recv(sizes.data(), sizes.size(), fc::DType::i64, h, kRestoreSizeTag);
      std::size_t total = 0;
      for (std::int64_t z : sizes) total += static_cast<std::size_t>(z);
      Bytes& b = receive_buffer(total);
      std::size_t at = 0;
      for (std::int64_t z : sizes) {
        recvs.push_back(irecv_bytes(c, std::span(b).subspan(at, static_cast<std::size_t>(z)), h, kRestoreTag));
        at += static_cast<std::size_t>(z);
      }
      mine[u] = b;
      got += static_cast<std::int64_t>(total);
    }
    for (auto& r : recvs) r.wait();
    for (auto& r : sends) r.wait();
    return mine;
  }

  // A pinned buffer of n bytes for a restore to receive into: the one a hot spare touched while it
  // waited when it fits (a fresh allocation's first writes fault its pages in: about half the time
  // of a 15 MB transfer here), else a new one.
  Bytes& receive_buffer(std::size_t n) {
    if (warm_buffer_ && warm_buffer_->size() == n) return *pins_.keep(std::exchange(warm_buffer_, nullptr));
    return pins_.bytes(n);
  }

  // --- Replica verification (train/replica_verifier.hpp), stragglers (train/straggler_watch.hpp)
  // and the faults that do not crash (bitflip, slow) ---

  // Whether the live replicas are compared: some unit has two or more (every dp rank with two or
  // more; the hybrids' positions with two or more model replicas).
  bool verifying() const { return cfg_.verify_every > 0 && grid_.replicas > 1; }

  // What one exchange found: the replicas' vote, and with timing the ranks that just became
  // stragglers (original ranks) and each rank's own ms per step since the last check.
  struct CheckResult {
    ReplicaVerdict verdict;
    std::vector<int> stragglers;
    std::vector<double> own_ms;
  };

  // One allgather over c of (digest of this rank's units, its mean own µs per step since the last
  // check or -1): the replicas vote (when verifying(); clean: the packed units become the last
  // verified state) and, with `timing`, the straggler watch counts. Every rank calls it alike.
  CheckResult check_replicas(fc::Communicator& c, bool timing = false) {
    if (cfg_.verify_every == 0) return {};
    std::map<UnitKey, std::shared_ptr<Bytes>> units;
    std::uint64_t digest = 0;
    if (model_ && verifying())
      for (const UnitKey& u : s_->units_of(grid_.model, position())) {
        auto b = std::make_shared<Bytes>(s_->pack(u));
        digest = digest * 0x100000001b3ULL + state_digest(*b);
        units.emplace(u, std::move(b));
      }
    const std::int64_t own_us = own_steps_ > 0 && model_ ? static_cast<std::int64_t>(1000 * own_ms_ / own_steps_) : -1;
    own_ms_ = 0;
    own_steps_ = 0;
    const int n = c.size();
    auto& mine = *pins_.keep(std::make_shared<std::array<std::int64_t, 2>>(
        std::array<std::int64_t, 2>{static_cast<std::int64_t>(digest), own_us}));
    auto& all = *pins_.keep(std::make_shared<std::vector<std::int64_t>>(2 * static_cast<std::size_t>(n)));
    fc::allgather(c, mine.data(), all.data(), 2, fc::DType::i64);
    CheckResult out;
    std::vector<std::uint64_t> digests(static_cast<std::size_t>(n));
    std::vector<int> pos(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<std::size_t>(r);
      digests[i] = static_cast<std::uint64_t>(all[2 * i]);
      pos[i] = grid_.is_active(r) ? grid_.position_of(r) : -1;
      out.own_ms.push_back(all[2 * i + 1] < 0 ? -1.0 : static_cast<double>(all[2 * i + 1]) / 1000);
    }
    if (verifying()) out.verdict = vote(digests, pos);
    if (verifying() && out.verdict.clean()) verified_ = {p_, built_.value_or(std::pair{0, 0}), std::move(units)};
    if (timing) out.stragglers = watch_.observe(out.own_ms, g_.members());
    return out;
  }

  // The check at a --verify-every step. A mismatch, or a straggler to evict, is remembered and
  // settled by a recovery of every rank (the FaultDetected revokes the group), so that the
  // rollback and the exclusion are uniform even when a rank dies on the way (settle_verdict).
  void verify_step(fc::Communicator& c) {
    CheckResult r = check_replicas(c, /*timing=*/true);
    timer_.mark(Phase::verify);
    const int evict = report_stragglers(r);
    report_->slowdowns(watch_.slowdowns());
    if (r.verdict.clean() && evict < 0) return;
    remember_verdict(r.verdict, evict);
    // Every rank has the verdict (and rank 0 has said what it found) before any revokes the group:
    // a rank that threw at once would cut a slower one's allgather short.
    fc::barrier(c);
    throw fc::FaultDetected(r.verdict.clean() ? "straggler eviction" : "replica verification",
                            "at step " + std::to_string(p_.step) + ": " +
                                (r.verdict.clean() ? "rank " + std::to_string(evict) + " evicted as a straggler"
                                                   : describe(r.verdict)));
  }

  // The stragglers this check found: a line, an event and a counter each; with --evict-stragglers
  // the slowest of them is evicted (returned: its original rank; -1: none) when a hot spare or a
  // respawn can take its place or the job is predicted faster without it (evict_pays), said either way.
  int report_stragglers(const CheckResult& r) {
    const int active = grid_.active();
    const std::string newcomer = g_.spares_left() > 0 ? "hot spare" : g_.respawns_left() > 0 ? "respawned process" : "";
    const auto decide = [&](int who) {
      return decide_eviction(watch_.slowdown(who) * watch_.others_ms(who), watch_.others_ms(who), active, grid_.replicas,
                             grid_.model, newcomer);
    };
    int evict = -1;  // the slowest straggler whose eviction is allowed and pays
    for (int who : r.stragglers)
      if (cfg_.evict_stragglers && decide(who).evict && (evict < 0 || watch_.slowdown(who) > watch_.slowdown(evict))) evict = who;
    for (int who : r.stragglers) {
      const double x = watch_.slowdown(who), med = watch_.others_ms(who), own = x * med;
      report_->straggler_found();
      const auto [allowed, why] = decide(who);
      std::string line = "straggler: rank " + std::to_string(who) + "'s own compute took " + fixed(own) + " ms per step, " +
                         fixed(x) + "x the other ranks' median " + fixed(med) + " ms, at " + std::to_string(cfg_.straggler_window) +
                         " checks in a row (step " + std::to_string(p_.step) + ")";
      if (cfg_.evict_stragglers) line += allowed && who != evict ? "; not evicted: a slower straggler is, this time" : why;
      if (!cfg_.quiet || who == evict) log_.note(line);  // --quiet: an eviction only
      log_.event({{"event", "straggler"}, {"rank", who}, {"step", p_.step}, {"own_ms", own}, {"median_ms", med},
                  {"slowdown", x}, {"evicted", who == evict}, {"predicted_ms_without", predicted_step_without(med, active)}});
      if (who == evict) predicted_ms_ = newcomer.empty() ? predicted_step_without(med, active) : med;
    }
    if (evict < 0 && predicted_ms_ > 0 && !r.own_ms.empty()) {  // the check after an eviction: what happened
      log_.note("after the eviction: the median rank's own compute takes " + fixed(watch_.median_ms()) +
                " ms per step (predicted " + fixed(predicted_ms_) + " ms)");
      predicted_ms_ = 0;
    }
    return evict;
  }

  static std::string fixed(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", v);
    return b;
  }

  // Verdicts are numbered: every survivor leaves a recovery with the same verdict_applied_ (the
  // allreduce of settle_verdict), so the next one gets the same number on every rank that finds it.
  void remember_verdict(const ReplicaVerdict& v, int straggler = -1) {
    verdict_ = {verdict_applied_ + 1, p_.step, v.undecided, !v.clean(), {}, -1};
    for (int r : v.odd) verdict_.odd.push_back(g_.members()[static_cast<std::size_t>(r)]);
    verdict_.straggler = straggler;
  }

  std::string describe(const ReplicaVerdict& v) const {
    std::vector<int> orig;
    for (int r : v.odd) orig.push_back(g_.members()[static_cast<std::size_t>(r)]);
    std::string out = v.odd.empty() ? "" : "rank(s) " + joined(orig) + " differ from a strict majority of their replicas";
    if (v.undecided > 0)
      out += std::string(out.empty() ? "" : "; ") + std::to_string(v.undecided) +
             " unit group(s) differ with no strict majority";
    return out;
  }

  // First thing in a recovery: every survivor learns the newest mismatch verdict any of them holds
  // (one allreduce: the verdict is the same wherever it is known), and applies it once: the
  // outvoted ranks leave (ResilientGroup::leave_excluded: a failure the protocol then handles like
  // any other, spares and respawns included), the others roll back to the last verified state.
  // A verdict without a majority that repeats at the same step ends the job (a job-level error).
  void settle_verdict(recovery::ResilientGroup& grp) {
    fc::Communicator& c = grp.comm();
    const bool pending = verdict_.number > verdict_applied_;  // an applied one must not mix its fields in
    auto& w = *pins_.keep(std::make_shared<std::vector<std::int64_t>>(
        encode_verdict(pending ? &verdict_ : nullptr, grp.members(), c.rank(), {verified_.step(), undecided_at_, rest_caught_at_})));
    fc::allreduce(c, fc::kInPlace, w.data(), w.size(), fc::DType::i64, fc::ReduceOp::max);
    const SettledVerdict v = decode_verdict(w, grp.members());
    report_rest(grp, v);
    if (v.number <= verdict_applied_) return;  // none (-1), or applied here in an earlier try
    verdict_applied_ = v.number;
    const Fate mine = v.fate[static_cast<std::size_t>(c.rank())];
    if (v.evicts) report_->straggler_evicted();
    if (mine == Fate::evicted) grp.leave_excluded("evicted as a straggler (--evict-stragglers): its own compute time per step was "
                                      "above --straggler-factor times the median's at --straggler-window checks in a row; "
                                      "self-fenced (SIGKILL)");
    const std::int64_t at = v.step, to = v.rollback_to;
    if (mine == Fate::outvoted)
      grp.leave_excluded("excluded: its parameters or optimizer state differed from a strict majority of its replicas' "
                         "in the verification at step " + std::to_string(at) + " (silent data corruption); self-fenced (SIGKILL)");
    if (!v.rollback) return;  // a straggler's eviction alone: nobody rolls back (ranks are renumbered by the recovery)
    FTCC_INVARIANT(to >= 0) << "replica verification: a mismatch at step " << at << " and no rank holds a verified state";
    const std::vector<int>& odd = v.outvoted;
    const bool repeated = v.undecided > 0 && v.last_undecided_at == at;
    if (v.undecided > 0) undecided_at_ = at;
    std::string line = "replica verification at step " + std::to_string(at) + ": ";
    line += odd.empty() ? "replicas differ with no strict majority" : "rank(s) " + joined(odd) + " outvoted by their replicas";
    line += repeated ? "; the same mismatch again after rolling back: stopping"
                     : (odd.empty() ? "" : ", excluded") + std::string("; rolling back to verified step ") + std::to_string(to);
    log_.corruption_found({{"event", "replica_mismatch"}, {"step", at}, {"rolled_back_to", to}, {"excluded", odd},
                           {"undecided", v.undecided}, {"repeated", repeated}},
                          line, c.rank() == v.writer);
    report_->replica_mismatch(static_cast<std::int64_t>(odd.size()));
    // A newcomer holds no verified state, and a rank whose last check was cut short by a failure
    // may hold an older one than the others: its state (if any) is not the verified one, so the
    // restore gives it the rolled-back state of the ranks that hold it instead.
    if (repeated)
      throw ftcc::Error("replica verification: replicas differ with no strict majority at step " + std::to_string(at) +
                        " again after rolling back to step " + std::to_string(to) +
                        " (a fault that repeats: check the hardware of the ranks involved)");
    if (verified_.step() != to) {
      live_valid_ = false;
      store_.clear();
      recorded_.clear();
      return;
    }
    roll_back_to_verified(to);
  }

  // The ranks whose state at rest was found changed, as settle_verdict learned them: a line and an
  // event from rank 0, a counter on every rank. Their parts were dropped; this recovery restores them.
  void report_rest(recovery::ResilientGroup& grp, const SettledVerdict& v) {
    rest_caught_at_ = -1;  // said (or being said) by rank 0 now
    if (v.changed_at_rest.empty()) return;
    log_.corruption_found({{"event", "state_at_rest"}, {"step", v.changed_at_step}, {"ranks", v.changed_at_rest}},
                          "state at rest: rank(s) " + joined(v.changed_at_rest) + " found changed before step " +
                              std::to_string(v.changed_at_step) + " (silent data corruption): restored from the newest copy",
                          grp.comm().rank() == 0);
    report_->state_at_rest_mismatch(static_cast<std::int64_t>(v.changed_at_rest.size()));
  }

  // This rank's part back to the last verified state, and the position recorded with it. When the
  // recovery in progress re-formed the grid since (this rank's part is of another split, or it is
  // idle now), its verified units go to the store at that step instead, and the restore plan
  // rebuilds the parts from them like from any copies.
  void roll_back_to_verified(std::int64_t to) {
    FTCC_INVARIANT(verified_.step() == to) << "replica verification: the verified state here is of step "
                                           << verified_.step() << ", the verdict rolls back to step " << to;
    store_.drop_unmade();
    if (built_ && *built_ == verified_.split) {
      for (const auto& [u, b] : verified_.units) s_->unpack(u, *b);
      live_valid_ = true;
    } else {
      for (const auto& [u, b] : verified_.units) store_.put(to, u, b);
      live_valid_ = false;
    }
    p_ = verified_.progress;
    store_.drop_after(p_.step);
    recorded_.erase(recorded_.upper_bound(p_.step), recorded_.end());
    recorded_[p_.step] = p_;
    g_.set_committed_step(p_.step - 1);
  }

  // State at rest (train/state_at_rest.hpp, --verify-at-rest): sealed when the optimizer, the start
  // or a recovery has written this rank's part, checked before the part is next used, copied or
  // checkpointed. A change drops the live part (the recovery that follows restores it from the
  // newest copy the plan finds: a live replica's at this step, or a buddy copy, to which every rank
  // then rolls back) and starts that recovery on every rank (this rank's FaultDetected revokes the
  // group); the change is reported from settle_verdict. A rank caught a second time leaves.
  bool guarding_rest() const {
    const bool wanted = cfg_.verify_at_rest == AtRest::on ||
                        (cfg_.verify_at_rest == AtRest::automatic && grid_.replicas == 1 && grid_.model > 1);
    return wanted && model_ && live_valid_;
  }
  void seal_rest() {
    if (guarding_rest()) rest_.seal(s_->params(), s_->optimizer_state());
    else rest_.unseal();
  }
  void check_rest(const char* before) {
    if (!guarding_rest()) return;
    const bool intact = rest_.check(s_->params(), s_->optimizer_state());
    timer_.mark(Phase::at_rest);
    if (intact) return;
    const std::string where = "its parameters or optimizer state changed after step " + std::to_string(p_.step - 1) +
                              " wrote them (found before " + before + "; silent data corruption)";
    if (rest_.caught() >= 2)
      g_.leave_excluded("excluded: " + where + ", for the second time; self-fenced (SIGKILL)");
    std::fprintf(stderr, "ftcc-train: rank %d: %s: restoring it from the newest copy\n", g_.original_rank(), where.c_str());
    std::fflush(stderr);
    live_valid_ = false;
    rest_caught_at_ = p_.step;
    throw fc::FaultDetected("state at rest", "rank " + std::to_string(g_.original_rank()) + ": " + where);
  }

  // The bitflip faults of this rank (recovery/fault_spec.hpp) due at this step: grad before the
  // optimizer step (after_apply false), param and optim after it. Each fires `times` times.
  void inject_bitflips(bool after_apply) {
    const auto& specs = g_.injector().driver_faults();
    if (specs.empty() || !model_) return;
    flips_done_.resize(specs.size(), 0);
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const recovery::FaultSpec& f = specs[i];
      if (f.kind != recovery::FaultKind::bitflip || f.step != p_.step || flips_done_[i] >= f.times || (f.target != recovery::FlipTarget::grad) != after_apply) continue;
      const auto& [name, param] = s_->params().front();
      tensor::Tensor t = param;
      std::string what = "parameter " + name;
      if (f.target == recovery::FlipTarget::grad) {
        t = param.grad();
        what = "summed gradient of " + name;
      } else if (f.target == recovery::FlipTarget::optim) {
        const nn::NamedTensors st = s_->optimizer_state();  // "step" first, then the per-parameter buffers
        t = st.at(st.size() > 1 ? 1 : 0).second;
        what = "optimizer state " + st.at(st.size() > 1 ? 1 : 0).first;
      }
      if (!t.defined() || t.numel() == 0) continue;
      ++flips_done_[i];
      const std::int64_t element = flip_target_element(t);
      std::fprintf(stderr, "ftcc: fault injection on rank %d at step %lld (%d of %d): %s: bit %d of element %lld of %s\n",
                   g_.original_rank(), static_cast<long long>(p_.step), flips_done_[i], f.times, f.text.c_str(), f.bit,
                   static_cast<long long>(element), what.c_str());
      std::fflush(stderr);
      flip_bit(t, element, f.bit);
    }
  }

  // The slow fault (recovery/fault_spec.hpp) while it lasts: before computing, this rank sleeps so
  // that its own time per step is `factor` times its peers' (their median own time at the last
  // check; before the first, its own previous step's time without the sleep), counted as compute;
  // the ranks that need its results (the others' gradient sum, its pipeline neighbours, its tp
  // peers) wait for it as for a slow machine. Against the peers, not its own past: ranks sharing
  // cores compute faster while it sleeps, so (factor - 1) x its own time made a 3x rank measure
  // about 2x on the 2-core VM. Returns the ms slept.
  double inject_slowness() {
    double slept = 0;
    for (const recovery::FaultSpec& f : g_.injector().driver_faults()) {
      if (f.kind != recovery::FaultKind::slow || !model_ || p_.step < f.step ||
          (f.slow_steps > 0 && p_.step >= f.step + f.slow_steps))
        continue;
      if (p_.step == f.step)
        std::fprintf(stderr, "ftcc: fault injection on rank %d at step %lld: %s\n", g_.original_rank(),
                     static_cast<long long>(p_.step), f.text.c_str());
      const auto t0 = Clock::now();
      const double peers = watch_.others_ms(g_.original_rank());
      const double ms = peers > 0 ? f.factor * peers - last_own_ms_ : (f.factor - 1) * last_own_ms_;
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(std::max(0.0, ms)));
      slept += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      timer_.mark(Phase::compute);
    }
    return slept;
  }

  const TrainConfig& cfg_;
  recovery::ResilientGroup& g_;
  Clock::time_point t_start_;
  double data_s_ = 0;  // loading and preparing the data (before td_: td_'s initializer sets it)
  Digest cfg_hash_;
  TrainingData td_;
  std::vector<std::int64_t> widths_;
  std::unique_ptr<ParallelStrategy> s_;
  std::int64_t global_batch_;  // --batch, or after failures with --on-failure keep-local-batch its share
  std::unique_ptr<data::DistributedSampler> sampler_;
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
  std::optional<std::pair<int, int>> built_;  // the split (n, r) of this rank's part, when it holds one
  bool live_valid_ = false;  // the part holds the state of p_.step (see offer_live_units)
  ProgressReporter* report_ = nullptr;  // run()'s
  VerifiedState verified_;              // the last state every replica agreed on
  std::shared_ptr<Bytes> warm_buffer_;  // a hot spare's receive buffer for its heal (receive_buffer)
  PendingVerdict verdict_;
  std::int64_t verdict_applied_ = -1;   // the step of the last verdict applied here
  std::int64_t undecided_at_ = -1;      // the step of the last verdict without a majority (settled)
  std::vector<int> flips_done_;         // per bitflip spec: times fired
  StateAtRest rest_;                    // this rank's state sealed when written (--verify-at-rest)
  std::int64_t rest_caught_at_ = -1;    // the step at which this rank's state was found changed, until reported
  StragglerWatch watch_{cfg_.straggler_factor, cfg_.straggler_window};
  double own_ms_ = 0;                   // this rank's own compute ms over the steps since the last check
  std::int64_t own_steps_ = 0;
  double last_own_ms_ = 0;              // this rank's own ms in its last step, without an injected slowdown
  double predicted_ms_ = 0;             // after an eviction: the predicted median, said at the next check
  WireFlip wire_{g_.injector().driver_faults(), g_.original_rank()};  // the wireflip fault, when injected here
};

}  // namespace

TrainSummary train_with_strategy(const TrainConfig& cfg, recovery::ResilientGroup& group, const StrategyFactory& make) {
  return Driver(cfg, group, make).run();
}

TrainSummary run_training(const TrainConfig& cfg, recovery::ResilientGroup& group) {
  switch (cfg.parallel) {
    case Parallel::dp: return train_with_strategy(cfg, group, make_data_parallel_strategy);
    case Parallel::pp:
    case Parallel::dp_pp: return train_with_strategy(cfg, group, make_pipeline_strategy);
    case Parallel::tp:
    case Parallel::dp_tp: return train_with_strategy(cfg, group, make_tensor_strategy);
  }
  FTCC_INVARIANT(false) << "run_training: --parallel " << static_cast<int>(cfg.parallel);
  return {};
}

}  // namespace ftcc::train
