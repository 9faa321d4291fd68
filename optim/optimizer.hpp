// optim/optimizer.hpp: the optimizer base: a list of named parameters, step(), zero_grad() and a
// state dict of named tensors.
//
// State is allocated at construction (zeros), so state_dict() lists the same names with the same
// shapes from the first step on, on every rank: a trainer can hash or broadcast it at any time.
// state_dict() returns *live* handles: reading them reads the optimizer's state, writing into them
// (or load_state_dict) changes it. Names: "step" (float64 [1], the number of steps taken), then
// per parameter "<param name>.<buffer>" in parameter order (momentum_buffer; exp_avg, exp_avg_sq).
// Updates run on the parameters' device through tensor/fused_update.hpp (one fused pass).
#pragma once

#include <cstdint>

#include "ftcc/nn/module.hpp"
#include "ftcc/nn/named_tensors.hpp"

namespace ftcc::optim {

using nn::NamedTensors;
using tensor::Tensor;

class Optimizer {
 public:
  explicit Optimizer(NamedTensors params);
  virtual ~Optimizer() = default;

  // Applies one update from the parameters' current gradients.
  virtual void step() = 0;
  void zero_grad() const;
  virtual std::string type_name() const = 0;

  NamedTensors state_dict() const;
  // Copies values from `state` (same names and shapes, e.g. from a checkpoint or a broadcast).
  void load_state_dict(const NamedTensors& state);

  std::int64_t step_count() const;
  const NamedTensors& params() const { return params_; }
  virtual void set_lr(double lr) = 0;
  virtual double lr() const = 0;

 protected:
  // Allocates a zero state buffer shaped like parameter i and registers it as "<name>.<suffix>".
  Tensor add_state(std::size_t i, const std::string& suffix);
  void advance_step();

  NamedTensors params_;

 private:
  NamedTensors state_;  // "step" first
  Tensor step_;         // float64 [1] on the CPU
};

}  // namespace ftcc::optim
