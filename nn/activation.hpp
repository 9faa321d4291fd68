// nn/activation.hpp: parameter-free elementwise layers (ReLU, Tanh, Sigmoid) for Sequential.
#pragma once

#include "ftcc/nn/module.hpp"

namespace ftcc::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

}  // namespace ftcc::nn
