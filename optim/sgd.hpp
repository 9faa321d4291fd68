// optim/sgd.hpp: stochastic gradient descent with momentum, Nesterov momentum and (L2) weight
// decay, with PyTorch's semantics (torch.optim.SGD): the momentum buffer starts as the first
// gradient, dampening scales later gradients. State: "<param>.momentum_buffer" when momentum != 0.
#pragma once

#include "ftcc/optim/optimizer.hpp"

namespace ftcc::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, SGDOptions options);
  void step() override;
  std::string type_name() const override { return "SGD"; }
  void set_lr(double lr) override { options_.lr = lr; }
  double lr() const override { return options_.lr; }
  const SGDOptions& options() const { return options_; }

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;
};

}  // namespace ftcc::optim
