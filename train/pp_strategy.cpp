#include "ftcc/train/pp_strategy.hpp"

#include <algorithm>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/partition.hpp"
#include "ftcc/train/pp_stage.hpp"
#include "ftcc/train/step_breakdown.hpp"

namespace ftcc::train {
namespace {

namespace fc = ftcc::comm;

constexpr int kForwardTag = 1, kBackwardTag = 2;

// One step of one stage: its micro-batches' forwards and backwards (in the order the schedule
// calls them), the activations it holds between them and the sends in flight. A forward's send to
// the next stage is complete once that stage's gradient for the micro-batch is back (it received
// the activations before it computed the gradient), so backward(k) waits for it and lets go; the
// backwards' sends let go as soon as a test finds them done. Every buffer stays pinned until then.
struct StageStep {
  struct InFlight {
    fc::P2PRequest req;
    tensor::Tensor buf;
  };
  const TrainConfig& cfg;
  PipelineStage& stage;
  fc::Communicator& c;
  const StepWork& work;
  Pins& pins;
  const int me = c.rank();
  const bool first = me == 0, last = me == c.size() - 1;
  data::Batch b;  // this replica's rows (the first and last stages)
  std::vector<tensor::Tensor> ins = std::vector<tensor::Tensor>(static_cast<size_t>(micro_batches()));
  std::vector<tensor::Tensor> outs = std::vector<tensor::Tensor>(static_cast<size_t>(micro_batches()));
  std::vector<InFlight> fwd_sends = std::vector<InFlight>(static_cast<size_t>(micro_batches()));
  std::vector<InFlight> bwd_sends;
  StepShare share;

  StageStep(const TrainConfig& cfg_, PipelineStage& stage_, fc::Communicator& c_, const StepWork& work_, Pins& pins_)
      : cfg(cfg_), stage(stage_), c(c_), work(work_), pins(pins_) {}

  std::int64_t micro_batches() const { return static_cast<std::int64_t>(work.cuts.size()) - 1; }
  // Time spent waiting for a neighbour (a receive, a send's completion) goes to exposed_comm, the
  // rest to compute: the straggler watch then sees this stage's own work, not its neighbours'.
  void mark(Phase p) const {
    if (work.timer != nullptr) work.timer->mark(p);
  }
  template <class Wait>
  void waiting(Wait&& wait) const {
    mark(Phase::compute);
    wait();
    mark(Phase::exposed_comm);
  }

  // A GPU stage's activations and gradients travel through host copies (train/pinned_buffers.hpp).
  InFlight send(const tensor::Tensor& data, int peer, int tag) {
    const tensor::Tensor t = on_host(data);
    return InFlight{c.isend(pins.keep(t).data(), static_cast<size_t>(t.numel()), fc::DType::f32, peer, tag), t};
  }
  void done(InFlight& f) {
    pins.release(f.buf);
    f.buf = tensor::Tensor();
  }
  void reap() {
    std::erase_if(bwd_sends, [&](InFlight& f) {
      if (!f.req.test()) return false;
      done(f);
      return true;
    });
  }

  void forward(std::int64_t k) {
    reap();
    const std::int64_t s = work.cuts[static_cast<size_t>(k)], e = work.cuts[static_cast<size_t>(k) + 1];
    tensor::Tensor in;
    if (first) {
      in = b.x.rows(s, e);
      share.fed.add(work.epoch, std::span<const std::int64_t>(work.ids).subspan(static_cast<std::size_t>(s),
                                                                                static_cast<std::size_t>(e - s)));
    } else {
      const tensor::Tensor got = pins.keep(tensor::Tensor::empty({e - s, stage.in_width()}));
      waiting([&] { c.recv(got.data(), static_cast<size_t>(got.numel()), fc::DType::f32, me - 1, kForwardTag); });
      pins.release(got);  // received: no operation writes to it any more
      in = on_device(got, cfg.device);
      in.requires_grad_(true);
    }
    tensor::Tensor out = stage.forward(in);
    if (last) {
      out = batch_loss(cfg.loss_in_use(), out, b.y.rows(s, e), work.global_rows);
      share.loss += out.item();
    } else {  // the bytes only: pinning `out` itself would keep its graph (the activations) alive
      fwd_sends[static_cast<size_t>(k)] = send(out.detach(), me + 1, kForwardTag);
    }
    ins[static_cast<size_t>(k)] = in;
    outs[static_cast<size_t>(k)] = out;
  }

  void backward(std::int64_t k) {
    reap();
    tensor::Tensor& out = outs[static_cast<size_t>(k)];
    if (last) {
      out.backward();
    } else {
      const tensor::Tensor got = pins.keep(tensor::Tensor::empty(out.shape()));
      waiting([&] { c.recv(got.data(), static_cast<size_t>(got.numel()), fc::DType::f32, me + 1, kBackwardTag); });
      pins.release(got);
      const tensor::Tensor grad = on_device(got, cfg.device);
      InFlight& f = fwd_sends[static_cast<size_t>(k)];
      waiting([&] { f.req.wait(); });
      done(f);
      tensor::run_backward(out, grad);
    }
    if (!first) bwd_sends.push_back(send(ins[static_cast<size_t>(k)].grad(), me - 1, kBackwardTag));
    out = tensor::Tensor();
    ins[static_cast<size_t>(k)] = tensor::Tensor();
    if (work.parts_of != nullptr) {  // this micro-batch's gradients alone (zeroed before the step)
      share.parts.push_back(work.parts_of->snapshot());
      stage.optimizer().zero_grad();
    }
  }

  void finish_sends() {
    for (auto& f : bwd_sends) {
      waiting([&] { f.req.wait(); });
      done(f);
    }
  }
};

class PipelineStrategy final : public ParallelStrategy {
 public:
  PipelineStrategy(const TrainConfig& cfg, const std::vector<std::int64_t>& widths, const TrainingData& td)
      : cfg_(cfg), widths_(widths), td_(td), L_(static_cast<int>(widths.size()) - 1), costs_(layer_costs(widths)) {}

  const char* name() const override { return "pp"; }
  const char* units_name() const override { return "layers"; }
  const char* regroup_name() const override { return "layers re-partitioned"; }

  void validate(int n, bool /*at_start*/) const override {
    const std::string where = cfg_.parallel == Parallel::dp_pp ? "--pp-size " + std::to_string(n)
                                                               : "--parallel pp on " + std::to_string(n) + " ranks";
    FTCC_REQUIRE(n <= L_) << where << " needs at least " << n << " layers; --layers gives " << L_
                          << " (one stage per rank, a stage is at least one Linear+activation)";
  }
  int max_split() const override { return L_; }

  std::vector<UnitKey> units_of(int n, int r) const override {
    const auto b = partition_layers(costs_, n);
    std::vector<UnitKey> out;
    for (int l = b[static_cast<std::size_t>(r)]; l < b[static_cast<std::size_t>(r) + 1]; ++l) out.push_back({l, L_});
    return out;
  }

  void build(int n, int r) override {
    const auto b = partition_layers(costs_, n);
    stage_ = std::make_unique<PipelineStage>(cfg_, widths_, b[static_cast<std::size_t>(r)],
                                             b[static_cast<std::size_t>(r) + 1]);
  }
  Bytes pack(UnitKey u) const override { return stage_->pack_layer(u.index); }
  void unpack(UnitKey u, std::span<const std::byte> bytes) override { stage_->unpack_layer(u.index, bytes); }
  std::size_t unit_bytes(UnitKey u) const override { return stage_->layer_bytes(u.index); }
  // The layer's tensors stay until the next build: a restore sends straight from them.
  std::vector<std::span<const std::byte>> unit_views(UnitKey u) const override {
    return host_views(stage_->layer_state(u.index));
  }
  std::size_t state_bytes() const override { return stage_->state_bytes(); }

  std::size_t full_unit_bytes(const FullModel& f, UnitKey u) const override { return nn::total_bytes(of_full(f, u)); }
  void unit_to_full(FullModel& f, UnitKey u, std::span<const std::byte> bytes) const override {
    nn::unpack_bytes(of_full(f, u), bytes);
  }
  Bytes unit_from_full(const FullModel& f, UnitKey u) const override { return nn::pack_bytes(of_full(f, u)); }

  // A layer keeps its identity across partitions: a rank needs exactly the layers of its new stage.
  std::vector<int> restore_units(int of, int n, int r) const override {
    FTCC_INVARIANT(of == L_) << "pp: a copy of " << of << " units for a model of " << L_ << " layers";
    std::vector<int> out;
    for (const UnitKey& u : units_of(n, r)) out.push_back(u.index);
    return out;
  }
  void rebuild(int n, int r, int /*of*/, const UnitBytes& units) override {
    build(n, r);
    for (int l = stage_->first(); l < stage_->last(); ++l) stage_->unpack_layer(l, units.at(l));
  }

  // The micro-batches of this rank's rows go through the stages in the order of --schedule:
  // gpipe: every forward, then every backward; 1f1b: stage s runs min(n-1-s, M) forwards, then
  // one forward and one backward in turn, then the backwards left, so it holds the activations of
  // at most n-s micro-batches. The backwards run in micro-batch order in both, so each
  // parameter's gradient is summed in the same order: the same bits. In dp,pp under
  // --deterministic each micro-batch's gradient is kept apart instead (work.parts_of), for the
  // driver's exact sum over the replicas. Sends are nonblocking (a forward and a backward may
  // cross between neighbours) and complete before the step returns.
  StepShare step(fc::Communicator& c, const StepWork& work, Pins& pins) override {
    FTCC_INVARIANT(stage_->first() == units_of(c.size(), c.rank()).front().index) << "pp: stage built for another partition";
    FTCC_INVARIANT(!work.cuts.empty() && work.cuts.front() == 0 &&
                   work.cuts.back() == static_cast<std::int64_t>(work.ids.size()))
        << "pp: micro-batch cuts do not cover the replica's " << work.ids.size() << " rows";
    StageStep run(cfg_, *stage_, c, work, pins);
    if ((run.first || run.last) && !work.ids.empty()) run.b = td_.train.gather(work.ids, cfg_.device);
    stage_->optimizer().zero_grad();
    const std::int64_t M = run.micro_batches();
    if (cfg_.schedule == Schedule::gpipe) {
      for (std::int64_t k = 0; k < M; ++k) run.forward(k);
      for (std::int64_t k = 0; k < M; ++k) run.backward(k);
    } else {
      const std::int64_t warmup = std::min<std::int64_t>(c.size() - 1 - c.rank(), M);
      for (std::int64_t k = 0; k < warmup; ++k) run.forward(k);
      for (std::int64_t k = 0; k + warmup < M; ++k) {
        run.forward(k + warmup);
        run.backward(k);
      }
      for (std::int64_t k = M - warmup; k < M; ++k) run.backward(k);
    }
    run.finish_sends();
    // With work.parts_of the gradients are zero here; the driver's exact sum checks the parts.
    run.share.gradients_finite = all_finite(nn::gradients_of(stage_->params()));
    run.mark(Phase::compute);
    run.share.timed = work.timer != nullptr;
    return std::move(run.share);
  }
  const nn::NamedTensors& params() const override { return stage_->params(); }
  nn::NamedTensors optimizer_state() const override { return stage_->optimizer().state_dict(); }
  void apply() override { stage_->optimizer().step(); }

 private:
  nn::NamedTensors of_full(const FullModel& f, UnitKey u) const {
    return layer_state(f.model->named_parameters(), f.opt->state_dict(), u.index);
  }

  const TrainConfig& cfg_;
  std::vector<std::int64_t> widths_;
  const TrainingData& td_;
  int L_;
  std::vector<std::int64_t> costs_;
  std::unique_ptr<PipelineStage> stage_;
};

}  // namespace

std::unique_ptr<ParallelStrategy> make_pipeline_strategy(const TrainConfig& cfg,
    const std::vector<std::int64_t>& widths, const TrainingData& data) {
  return std::make_unique<PipelineStrategy>(cfg, widths, data);
}

}  // namespace ftcc::train
