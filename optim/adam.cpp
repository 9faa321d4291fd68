#include "ftcc/optim/adam.hpp"

#include <cmath>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/fused_update.hpp"

namespace ftcc::optim {

Adam::Adam(NamedTensors params, AdamOptions options) : Optimizer(std::move(params)), options_(options) {
  FTCC_CHECK(options.lr >= 0) << "Adam: lr " << options.lr;
  FTCC_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1)
      << "Adam: betas (" << options.beta1 << ", " << options.beta2 << ") must be in [0, 1)";
  FTCC_CHECK(options.eps >= 0) << "Adam: eps " << options.eps;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    m_.push_back(add_state(i, "exp_avg"));
    v_.push_back(add_state(i, "exp_avg_sq"));
  }
}

void Adam::step() {
  advance_step();
  // Bias corrections in double: 1 - beta^t loses all precision in float once beta^t ~ 1 - 1e-7.
  double t = static_cast<double>(step_count());
  tensor::AdamUpdate u{static_cast<float>(options_.lr),
                       static_cast<float>(options_.beta1),
                       static_cast<float>(options_.beta2),
                       static_cast<float>(options_.eps),
                       static_cast<float>(options_.weight_decay),
                       options_.decoupled_weight_decay,
                       static_cast<float>(1.0 - std::pow(options_.beta1, t)),
                       static_cast<float>(1.0 - std::pow(options_.beta2, t)),
                       static_cast<float>(1.0 - options_.beta1),
                       static_cast<float>(1.0 - options_.beta2)};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    tensor::adam_update(p, p.grad(), m_[i], v_[i], u);
  }
}

}  // namespace ftcc::optim
