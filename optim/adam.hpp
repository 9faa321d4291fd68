// optim/adam.hpp: Adam (Kingma & Ba) and AdamW (Loshchilov & Hutter: decoupled weight decay),
// with PyTorch's semantics (torch.optim.Adam / AdamW, amsgrad off). State per parameter:
// "<param>.exp_avg" (first moment) and "<param>.exp_avg_sq" (second moment).
#pragma once

#include "ftcc/optim/optimizer.hpp"

namespace ftcc::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true: AdamW
};

class Adam : public Optimizer {
 public:
  Adam(NamedTensors params, AdamOptions options);
  void step() override;
  std::string type_name() const override { return options_.decoupled_weight_decay ? "AdamW" : "Adam"; }
  void set_lr(double lr) override { options_.lr = lr; }
  double lr() const override { return options_.lr; }
  const AdamOptions& options() const { return options_; }

 private:
  AdamOptions options_;
  std::vector<Tensor> m_, v_;
};

// AdamW with PyTorch's default weight decay (0.01).
inline AdamOptions adamw_options(double lr = 1e-3, double weight_decay = 0.01) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.decoupled_weight_decay = true;
  return o;
}

}  // namespace ftcc::optim
