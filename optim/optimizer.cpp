#include "ftcc/optim/optimizer.hpp"

#include "ftcc/base/error.hpp"

namespace ftcc::optim {

Optimizer::Optimizer(NamedTensors params) : params_(std::move(params)) {
  FTCC_CHECK(!params_.empty()) << "optimizer without parameters";
  for (const auto& [name, p] : params_) {
    FTCC_CHECK(p.requires_grad() && p.is_leaf()) << "optimizer: '" << name << "' is not a trainable leaf";
    FTCC_CHECK(p.dtype() == tensor::DType::f32) << "optimizer: '" << name << "' is not float32";
  }
  step_ = Tensor::zeros({1}, tensor::DType::f64);
  state_.emplace_back("step", step_);
}

void Optimizer::zero_grad() const {
  for (const auto& [name, p] : params_) p.zero_grad();
}

NamedTensors Optimizer::state_dict() const { return state_; }

void Optimizer::load_state_dict(const NamedTensors& state) {
  FTCC_CHECK(state.size() == state_.size()) << type_name() << " state: " << state.size() << " tensors given, "
                                            << state_.size() << " expected";
  for (std::size_t i = 0; i < state.size(); ++i) {
    const auto& [name, src] = state[i];
    const auto& [want, dst] = state_[i];
    FTCC_CHECK(name == want) << type_name() << " state: tensor " << i << " is '" << name << "', expected '" << want << "'";
    FTCC_CHECK(src.shape() == dst.shape()) << type_name() << " state: '" << name << "' has shape "
                                           << tensor::shape_str(src.shape()) << ", expected "
                                           << tensor::shape_str(dst.shape());
    FTCC_CHECK(src.dtype() == dst.dtype()) << type_name() << " state: '" << name << "' is "
                                           << tensor::dtype_name(src.dtype()) << ", expected "
                                           << tensor::dtype_name(dst.dtype());
  }
  for (std::size_t i = 0; i < state.size(); ++i) state_[i].second.copy_(state[i].second);
}

std::int64_t Optimizer::step_count() const { return static_cast<std::int64_t>(*step_.data_as<double>()); }

Tensor Optimizer::add_state(std::size_t i, const std::string& suffix) {
  const Tensor& p = params_.at(i).second;
  Tensor t = Tensor::zeros(p.shape(), p.dtype(), p.device());
  state_.emplace_back(params_[i].first + "." + suffix, t);
  return t;
}

void Optimizer::advance_step() { *step_.data_as<double>() += 1.0; }

}  // namespace ftcc::optim
