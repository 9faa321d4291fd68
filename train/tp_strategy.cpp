#include "ftcc/train/tp_strategy.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/step_breakdown.hpp"
#include "ftcc/train/tp_exact_pair.hpp"
#include "ftcc/train/tp_shard.hpp"

namespace ftcc::train {
namespace {

namespace fc = ftcc::comm;
using tensor::Device;

// A parameter as the exact pair (a CPU algorithm) sees it: itself on the CPU; on a GPU a host copy
// holding a host copy of its gradient, to which the pair adds, and which give_back() then writes
// over the parameter's own gradient.
struct HostParam {
  tensor::Tensor param, host;
  explicit HostParam(const tensor::Tensor& p) : param(p), host(p) {
    if (p.device() == Device::CPU) return;
    host = p.detach().to(Device::CPU);
    host.requires_grad_(true);
    host.grad().copy_(p.grad());
  }
  void give_back() const {
    if (param.device() != Device::CPU) param.grad().copy_(host.grad());
  }
};

class TensorStrategy final : public ParallelStrategy {
 public:
  TensorStrategy(const TrainConfig& cfg, const std::vector<std::int64_t>& widths, const TrainingData& td)
      : cfg_(cfg), widths_(widths), td_(td), L_(static_cast<int>(widths.size()) - 1) {}

  const char* name() const override { return "tp"; }
  const char* units_name() const override { return "shard(s)"; }
  const char* regroup_name() const override { return "shards re-split"; }

  void validate(int n, bool at_start) const override {
    FTCC_REQUIRE(L_ >= 2) << "--parallel tp needs at least one column/row-parallel Linear pair (3 widths); --layers "
                          << "gives " << L_ << " layer";
    if (!at_start) {  // survivors re-split as evenly as they can: a slice of at least one feature each
      FTCC_REQUIRE(min_split_width(widths_) >= n) << "--parallel tp: " << n << " survivors but a hidden width of only "
                                                  << min_split_width(widths_);
      return;
    }
    const std::string where = cfg_.parallel == Parallel::dp_tp ? "--tp-size " + std::to_string(n)
                                                               : "--parallel tp on " + std::to_string(n) + " ranks";
    for (int i = 0; i + 1 < L_; i += 2) {
      const std::int64_t h = widths_[static_cast<size_t>(i) + 1];
      FTCC_REQUIRE(h % n == 0) << where << ": the hidden width " << h << " of layers " << i
                               << "-" << i + 1 << " (column-parallel Linear " << widths_[static_cast<size_t>(i)] << "->"
                               << h << ", row-parallel " << h << "->" << widths_[static_cast<size_t>(i) + 2]
                               << ") is not divisible by " << n;
    }
  }

  int max_split() const override { return static_cast<int>(std::min<std::int64_t>(min_split_width(widths_), 1 << 20)); }

  std::vector<UnitKey> units_of(int n, int r) const override { return {{r, n}}; }

  // The shard of rank r of n, sliced from a freshly initialised full model.
  void build(int n, int r) override {
    FullModel f = make_full_model(cfg_, widths_);
    slice(f, n, r);
  }
  Bytes pack(UnitKey u) const override {
    check_mine(u);
    return nn::pack_bytes(live());
  }
  void unpack(UnitKey u, std::span<const std::byte> bytes) override {
    check_mine(u);
    nn::unpack_bytes(live(), bytes);
  }
  std::size_t unit_bytes(UnitKey u) const override {
    check_mine(u);
    return nn::total_bytes(live());
  }
  // The shard's tensors stay until the next slice: a restore sends straight from them.
  std::vector<std::span<const std::byte>> unit_views(UnitKey u) const override {
    check_mine(u);
    return host_views(live());
  }
  std::size_t state_bytes() const override { return nn::total_bytes(live()); }

  std::size_t full_unit_bytes(const FullModel& f, UnitKey u) const override {
    return shard_bytes(f.state(), L_, u.of, u.index);
  }
  void unit_to_full(FullModel& f, UnitKey u, std::span<const std::byte> bytes) const override {
    shard_to_full(f.state(), L_, u.of, u.index, bytes);
  }
  Bytes unit_from_full(const FullModel& f, UnitKey u) const override {
    Bytes b(shard_bytes(f.state(), L_, u.of, u.index));
    full_to_shard(f.state(), L_, u.of, u.index, b);
    return b;
  }

  // Slices change with the rank count: every rank needs every shard of the old split.
  std::vector<int> restore_units(int of, int /*n*/, int /*r*/) const override {
    std::vector<int> all(static_cast<std::size_t>(of));
    for (int k = 0; k < of; ++k) all[static_cast<std::size_t>(k)] = k;
    return all;
  }
  void rebuild(int n, int r, int of, const UnitBytes& units) override {
    FullModel f = make_full_model(cfg_, widths_);
    for (const auto& [k, b] : units) unit_to_full(f, {k, of}, b);
    slice(f, n, r);
  }

  // The replica's rows as one batch on every rank; under dp,tp --deterministic one micro-batch
  // at a time (work.cuts), each one's gradient kept apart for the driver's exact sum (work.parts_of).
  StepShare step(fc::Communicator& c, const StepWork& work, Pins& pins) override {
    check_mine({c.rank(), c.size()});
    StepShare share;
    timer_ = work.timer;
    share.timed = timer_ != nullptr;
    if (c.rank() == 0) share.fed.add(work.epoch, work.ids);  // every rank feeds the whole batch: count it once
    opt_->zero_grad();
    if (work.ids.empty()) {  // dp,tp --deterministic: fewer micro-batches than replicas
      mark(Phase::compute);
      timer_ = nullptr;
      return share;
    }
    data::Batch b = td_.train.gather(work.ids, cfg_.device);
    double loss = 0;
    if (work.parts_of == nullptr) {
      loss = rows_step(c, b.x, b.y, work.global_rows, pins);
    } else {
      for (std::size_t k = 0; k + 1 < work.cuts.size(); ++k) {
        const std::int64_t s = work.cuts[k], e = work.cuts[k + 1];
        loss += rows_step(c, b.x.rows(s, e), b.y.rows(s, e), work.global_rows, pins);
        share.parts.push_back(work.parts_of->snapshot());
        opt_->zero_grad();
      }
    }
    // The loss is the same on every rank: rank 0's is taken.
    if (c.rank() == 0) share.loss = loss;
    share.gradients_finite = all_finite(nn::gradients_of(params_));
    mark(Phase::compute);
    timer_ = nullptr;
    return share;
  }
  const nn::NamedTensors& params() const override { return params_; }
  nn::NamedTensors optimizer_state() const override { return opt_->state_dict(); }
  void apply() override { opt_->step(); }

 private:
  // This rank's shard for n ranks, sliced from f.
  void slice(const FullModel& f, int n, int r) {
    params_.clear();
    by_name_.clear();
    for (const auto& [name, t] : f.model->named_parameters()) {
      auto s = tensor::Tensor::zeros(shard_shape(name, t, L_, n, r), tensor::DType::f32, cfg_.device);
      s.requires_grad_(true);
      params_.emplace_back(name, s);
      by_name_[name] = s;
    }
    opt_ = make_optimizer(cfg_, params_);
    nn::unpack_bytes(live(), unit_from_full(f, {r, n}));
    split_ = {r, n};
  }
  nn::NamedTensors live() const {
    nn::NamedTensors l = params_;
    for (auto& nt : opt_->state_dict()) l.push_back(nt);
    return l;
  }
  void check_mine(UnitKey u) const {
    FTCC_INVARIANT(u == split_) << "tp: shard " << u.index << " of " << u.of << " asked, this rank holds " << split_.index
                            << " of " << split_.of;
  }
  const tensor::Tensor& param(int layer, const char* what) const {
    return by_name_.at(std::to_string(2 * layer) + "." + what);
  }

  // Forward and backward of rows x -> y (the loss scaled by the global batch), adding to the
  // gradients. Each pair runs as one autograd segment per side of each allreduce (X_j -> z_j
  // partial, Z_j -> Y_j), or, under --deterministic, by ExactTpPair (train/tp_exact_pair.hpp) with
  // the same bits on any shard count. Returns the loss.
  double rows_step(fc::Communicator& c, const tensor::Tensor& x, const tensor::Tensor& y, std::int64_t global_rows,
                   Pins& pins) {
    std::vector<PairStep> st(static_cast<size_t>(L_ / 2));
    tensor::Tensor h = x;
    for (int j = 0; j < L_ / 2; ++j) h = pair_forward(c, j, st[static_cast<size_t>(j)], h, pins);
    // Tail: the replicated last layer (odd layer count) and the loss.
    tensor::Tensor t = h.detach().clone();
    t.requires_grad_(true);
    tensor::Tensor out = t;
    if (L_ % 2 == 1) out = tensor::linear(t, param(L_ - 1, "weight"), param(L_ - 1, "bias"));
    auto loss = batch_loss(cfg_.loss_in_use(), out, y, global_rows);
    loss.backward();
    tensor::Tensor grad = t.grad();
    for (int j = L_ / 2 - 1; j >= 0; --j) grad = pair_backward(c, j, st[static_cast<size_t>(j)], grad, pins);
    return loss.item();
  }

  // The time of the pairs' allreduces (waiting for the slowest shard included) goes to
  // exposed_comm, the rest to compute, so the straggler watch sees this shard's own work. Under
  // --deterministic the exact pair's collective steps (its sums included) count as communication.
  void mark(Phase p) const {
    if (timer_ != nullptr) timer_->mark(p);
  }
  template <class Collective>
  auto communicating(Collective&& collective) const {
    mark(Phase::compute);
    auto out = collective();
    mark(Phase::exposed_comm);
    return out;
  }

  // One pair's forward and backward within a step.
  struct PairStep {
    tensor::Tensor x, z, Z, Y;          // input, partial output (float path), summed output, output
    std::optional<ExactTpPair> exact;  // --deterministic
  };
  tensor::Tensor pair_forward(fc::Communicator& c, int j, PairStep& s, const tensor::Tensor& h, Pins& pins) {
    const int col = 2 * j, row = 2 * j + 1;
    const tensor::Tensor &Wc = param(col, "weight"), &bc = param(col, "bias"), &Wr = param(row, "weight");
    if (cfg_.deterministic) {
      s.x = on_host(h.detach());
      s.exact.emplace(cfg_.activation, widths_[static_cast<size_t>(col) + 1]);
      s.exact->hidden(s.x, on_host(Wc), on_host(bc));
      s.Z = on_device(communicating([&] { return s.exact->output(c, on_host(Wr), pins); }), cfg_.device);
    } else {
      s.x = h;
      if (j > 0) {
        s.x = h.detach().clone();
        s.x.requires_grad_(true);
      }
      const auto a = tensor::linear(s.x, Wc, bc, as_fused(cfg_.activation));
      s.z = tensor::linear(a, Wr, tensor::Tensor());
      const tensor::Tensor sum = pins.keep(s.z.device() == Device::CPU ? s.z.detach().clone() : s.z.to(Device::CPU));
      communicating([&] {
        fc::allreduce(c, fc::kInPlace, sum.data(), static_cast<size_t>(sum.numel()), fc::DType::f32, fc::ReduceOp::sum);
        return 0;
      });
      s.Z = on_device(sum, cfg_.device);
    }
    s.Z.requires_grad_(true);
    s.Y = tensor::add(s.Z, param(row, "bias"));
    if (row + 1 < L_) s.Y = activate(cfg_.activation, s.Y);
    return s.Y;
  }
  // Returns dL/dx of pair j's input, summed over the ranks (undefined for the first pair).
  tensor::Tensor pair_backward(fc::Communicator& c, int j, PairStep& s, const tensor::Tensor& grad, Pins& pins) {
    const int col = 2 * j, row = 2 * j + 1;
    tensor::run_backward(s.Y, grad);
    if (s.exact) {
      const HostParam Wc(param(col, "weight")), bc(param(col, "bias")), Wr(param(row, "weight"));
      s.exact->slice_gradients(s.x, Wc.host, bc.host, Wr.host, on_host(s.Z.grad()));
      for (const HostParam* p : {&Wc, &bc, &Wr}) p->give_back();
      if (j == 0) return tensor::Tensor();
      return on_device(communicating([&] { return s.exact->input_gradient(c, Wc.host, pins); }), cfg_.device);
    }
    tensor::run_backward(s.z, s.Z.grad());
    if (j == 0) return tensor::Tensor();
    const tensor::Tensor dx = pins.keep(s.x.device() == Device::CPU ? s.x.grad().clone() : s.x.grad().to(Device::CPU));
    communicating([&] {
      fc::allreduce(c, fc::kInPlace, dx.data(), static_cast<size_t>(dx.numel()), fc::DType::f32, fc::ReduceOp::sum);
      return 0;
    });
    return on_device(dx, cfg_.device);
  }

  const TrainConfig& cfg_;
  std::vector<std::int64_t> widths_;
  const TrainingData& td_;
  int L_;
  nn::NamedTensors params_;
  std::map<std::string, tensor::Tensor> by_name_;
  std::unique_ptr<optim::Optimizer> opt_;
  UnitKey split_;
  StepBreakdown* timer_ = nullptr;  // the step's (StepWork::timer), during step() only
};

}  // namespace

std::unique_ptr<ParallelStrategy> make_tensor_strategy(const TrainConfig& cfg,
    const std::vector<std::int64_t>& widths, const TrainingData& data) {
  return std::make_unique<TensorStrategy>(cfg, widths, data);
}

}  // namespace ftcc::train
