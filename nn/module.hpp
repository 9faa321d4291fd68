// nn/module.hpp: the base of every layer: forward(), parameters in a canonical order, train/eval.
//
// named_parameters() lists this module's own parameters in registration order, then each child's
// (registration order, depth first) with "child." prefixed: for Sequential{Linear, ReLU, Linear}
// that is 0.weight, 0.bias, 2.weight, 2.bias, the same names PyTorch gives, so safetensors files
// can be exchanged. The returned Tensors are live handles: data() and grad().data() point at the
// parameter and gradient buffers themselves (contiguous float32), stable until to(device).
//
// To add a layer: derive, register_parameter() in the constructor, implement forward() with
// tensor/ops, and reset_parameters(seed) if it has weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ftcc/nn/named_tensors.hpp"
#include "ftcc/tensor/tensor.hpp"

namespace ftcc::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  virtual std::string type_name() const = 0;

  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::int64_t num_parameters() const;

  void zero_grad() const;
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Re-initialises every weight from `seed` alone (same values on every rank and platform).
  virtual void reset_parameters(std::uint64_t seed);
  // Moves parameters and their gradient buffers to `device` in place: existing handles follow.
  void to(tensor::Device device);

 protected:
  // The returned handle stays valid (it aliases the registered tensor).
  Tensor register_parameter(std::string name, Tensor t);
  void register_module(std::string name, std::shared_ptr<Module> child);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;
  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace ftcc::nn
