#include "ftcc/train/dp_strategy.hpp"

#include "ftcc/base/error.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/train/gradient_reducer.hpp"
#include "ftcc/train/step_breakdown.hpp"

namespace ftcc::train {
namespace {

class DataParallelStrategy final : public ParallelStrategy {
 public:
  DataParallelStrategy(const TrainConfig& cfg, const std::vector<std::int64_t>& widths, const TrainingData& td)
      : cfg_(cfg), widths_(widths), td_(td) {}

  const char* name() const override { return "dp"; }
  const char* units_name() const override { return "model"; }
  const char* regroup_name() const override { return "model"; }
  void validate(int n, bool /*at_start*/) const override {
    FTCC_INVARIANT(n == 1) << "dp: a model cut over " << n << " ranks";
  }
  int max_split() const override { return 1; }
  std::vector<UnitKey> units_of(int n, int r) const override {
    FTCC_INVARIANT(n == 1 && r == 0) << "dp: rank " << r << " of a model cut over " << n;
    return {{0, 1}};
  }

  // Built once: a rebuild writes the restored state into the same tensors, so the driver's
  // gradient reducer (whose arena holds their gradients) stays valid.
  void build(int n, int r) override {
    units_of(n, r);
    if (model_) return;
    model_ = nn::mlp(widths_, cfg_.activation, cfg_.seed);
    if (cfg_.device == Device::CUDA) model_->to(cfg_.device);
    params_ = model_->named_parameters();
    opt_ = make_optimizer(cfg_, params_);
  }
  Bytes pack(UnitKey u) const override { return nn::pack_bytes(state(u)); }
  void unpack(UnitKey u, std::span<const std::byte> bytes) override { nn::unpack_bytes(state(u), bytes); }
  std::size_t unit_bytes(UnitKey u) const override { return nn::total_bytes(state(u)); }
  std::vector<std::span<const std::byte>> unit_views(UnitKey u) const override { return host_views(state(u)); }
  std::size_t state_bytes() const override { return model_ ? nn::total_bytes(state({0, 1})) : 0; }

  std::size_t full_unit_bytes(const FullModel& f, UnitKey) const override { return nn::total_bytes(f.state()); }
  void unit_to_full(FullModel& f, UnitKey, std::span<const std::byte> bytes) const override {
    nn::unpack_bytes(f.state(), bytes);
  }
  Bytes unit_from_full(const FullModel& f, UnitKey) const override { return nn::pack_bytes(f.state()); }

  std::vector<int> restore_units(int of, int n, int r) const override {
    FTCC_INVARIANT(of == 1) << "dp: a copy of " << of << " units of a whole model";
    units_of(n, r);
    return {0};
  }
  void rebuild(int n, int r, int /*of*/, const UnitBytes& units) override {
    build(n, r);
    unpack({0, 1}, units.at(0));
  }

  // The replica's rows, in one forward and backward (--deterministic: one per micro-batch, each
  // one's gradient kept apart for the driver's exact sum).
  StepShare step(comm::Communicator& /*c*/, const StepWork& work, Pins& /*pins*/) override {
    StepShare share;
    share.timed = work.timer != nullptr;
    const auto mark = [&](Phase p) {
      if (work.timer) work.timer->mark(p);
    };
    opt_->zero_grad();
    mark(Phase::optimizer);
    if (work.ids.empty()) return share;
    const data::Batch b = td_.train.gather(work.ids, cfg_.device);
    mark(Phase::data);
    const LossKind loss_kind = cfg_.loss_in_use();
    for (std::size_t k = 0; k + 1 < work.cuts.size(); ++k) {
      const std::int64_t s = work.cuts[k], e = work.cuts[k + 1];
      const bool whole = s == 0 && e == static_cast<std::int64_t>(work.ids.size());
      auto loss = whole ? batch_loss(loss_kind, (*model_)(b.x), b.y, work.global_rows)
                        : batch_loss(loss_kind, (*model_)(b.x.rows(s, e)), b.y.rows(s, e), work.global_rows);
      mark(Phase::forward);
      loss.backward();
      mark(Phase::backward);
      share.loss += loss.item();
      share.fed.add(work.epoch, std::span<const std::int64_t>(work.ids).subspan(static_cast<std::size_t>(s),
                                                                                static_cast<std::size_t>(e - s)));
      if (work.parts_of != nullptr) {  // this micro-batch's gradients alone
        share.parts.push_back(work.parts_of->snapshot());
        opt_->zero_grad();
        mark(Phase::backward);
      }
    }
    return share;
  }
  const nn::NamedTensors& params() const override { return params_; }
  nn::NamedTensors optimizer_state() const override { return opt_->state_dict(); }
  void apply() override { opt_->step(); }
  nn::Module* whole_model() override { return model_.get(); }
  bool one_backward() const override { return true; }

 private:
  // Parameters, then the optimizer state: FullModel::state()'s order, so a checkpoint is this unit.
  nn::NamedTensors state(UnitKey u) const {
    FTCC_INVARIANT(model_ && u.index == 0 && u.of == 1) << "dp: unit " << u.index << " of " << u.of;
    nn::NamedTensors s = params_;
    for (auto& nt : opt_->state_dict()) s.push_back(nt);
    return s;
  }

  const TrainConfig& cfg_;
  std::vector<std::int64_t> widths_;
  const TrainingData& td_;
  std::shared_ptr<nn::Sequential> model_;
  nn::NamedTensors params_;
  std::unique_ptr<optim::Optimizer> opt_;
};

}  // namespace

std::unique_ptr<ParallelStrategy> make_data_parallel_strategy(const TrainConfig& cfg,
    const std::vector<std::int64_t>& widths, const TrainingData& data) {
  return std::make_unique<DataParallelStrategy>(cfg, widths, data);
}

}  // namespace ftcc::train
