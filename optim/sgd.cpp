#include "ftcc/optim/sgd.hpp"

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/fused_update.hpp"

namespace ftcc::optim {

SGD::SGD(NamedTensors params, SGDOptions options) : Optimizer(std::move(params)), options_(options) {
  FTCC_CHECK(options.lr >= 0) << "SGD: lr " << options.lr;
  FTCC_CHECK(options.momentum >= 0) << "SGD: momentum " << options.momentum;
  FTCC_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0))
      << "SGD: Nesterov momentum needs momentum > 0 and dampening 0";
  if (options.momentum != 0)
    for (std::size_t i = 0; i < params_.size(); ++i) momentum_.push_back(add_state(i, "momentum_buffer"));
}

void SGD::step() {
  tensor::SgdUpdate u{static_cast<float>(options_.lr), static_cast<float>(options_.momentum),
                      static_cast<float>(options_.dampening), static_cast<float>(options_.weight_decay),
                      options_.nesterov, step_count() == 0};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    tensor::sgd_update(p, p.grad(), momentum_.empty() ? Tensor() : momentum_[i], u);
  }
  advance_step();
}

}  // namespace ftcc::optim
