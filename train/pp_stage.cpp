#include "ftcc/train/pp_stage.hpp"

#include "ftcc/base/error.hpp"
#include "ftcc/train/run_common.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/random.hpp"

namespace ftcc::train {

nn::NamedTensors layer_state(const nn::NamedTensors& params, const nn::NamedTensors& opt_state, int layer) {
  const std::string prefix = std::to_string(2 * layer) + ".";
  nn::NamedTensors out;
  for (const auto& nt : params)
    if (nt.first.starts_with(prefix)) out.push_back(nt);
  FTCC_INVARIANT(out.size() == 2) << "layer " << layer << ": expected weight and bias named " << prefix << "*";
  bool step = false;
  for (const auto& nt : opt_state) {
    if (nt.first.starts_with(prefix)) out.push_back(nt);
    if (nt.first == "step" && !step) {
      out.push_back(nt);
      step = true;
    }
  }
  FTCC_INVARIANT(step) << "optimizer state has no 'step'";
  return out;
}

PipelineStage::PipelineStage(const TrainConfig& cfg, const std::vector<std::int64_t>& widths, int first, int last)
    : widths_(widths), first_(first), last_(last), activation_(cfg.activation) {
  const int L = static_cast<int>(widths.size()) - 1;
  FTCC_INVARIANT(0 <= first && first < last && last <= L) << "stage [" << first << ", " << last << ") of " << L << " layers";
  for (int i = first; i < last; ++i) {
    auto lin = std::make_shared<nn::Linear>(widths[static_cast<std::size_t>(i)], widths[static_cast<std::size_t>(i) + 1]);
    // nn::mlp puts layer i at module index 2i and seeds each module with mix_seed(seed, index).
    lin->reset_parameters(tensor::mix_seed(cfg.seed, 2 * static_cast<std::uint64_t>(i)));
    lin->to(cfg.device);  // initialised on the CPU: the same values on either device
    for (auto& [name, t] : lin->named_parameters()) params_.emplace_back(std::to_string(2 * i) + "." + name, t);
    linears_.push_back(std::move(lin));
  }
  opt_ = make_optimizer(cfg, params_);
}

tensor::Tensor PipelineStage::forward(const tensor::Tensor& x) const {
  const int L = static_cast<int>(widths_.size()) - 1;
  tensor::Tensor h = x;
  for (int i = first_; i < last_; ++i) {  // Linear and activation as one fused op (same bits)
    const auto act = i + 1 < L ? as_fused(activation_) : tensor::Activation::identity;
    h = linears_[static_cast<std::size_t>(i - first_)]->forward(h, act);
  }
  return h;
}

nn::NamedTensors PipelineStage::layer_state(int layer) const {
  FTCC_INVARIANT(holds(layer)) << "stage [" << first_ << ", " << last_ << ") does not hold layer " << layer;
  return train::layer_state(params_, opt_->state_dict(), layer);
}

std::vector<std::byte> PipelineStage::pack_layer(int layer) const { return nn::pack_bytes(layer_state(layer)); }

void PipelineStage::unpack_layer(int layer, std::span<const std::byte> bytes) {
  const auto list = layer_state(layer);
  FTCC_INVARIANT(bytes.size() == nn::total_bytes(list)) << "layer " << layer << ": state of " << bytes.size()
                                                    << " bytes, expected " << nn::total_bytes(list);
  nn::unpack_bytes(list, bytes);
}

std::size_t PipelineStage::layer_bytes(int layer) const { return nn::total_bytes(layer_state(layer)); }

std::size_t PipelineStage::state_bytes() const { return nn::total_bytes(params_) + nn::total_bytes(opt_->state_dict()); }

}  // namespace ftcc::train
