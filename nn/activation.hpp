// nn/activation.hpp: parameter-free elementwise layers (ReLU, Tanh, Sigmoid) for Sequential.
// Sequential runs a Linear followed by one of them as one fused op (tensor::linear with an
// activation), which gives the same bits as running them one after the other. It does so only
// for these classes themselves: a class derived from Linear or from one of them keeps its own
// forward().
#pragma once

#include "ftcc/nn/module.hpp"
#include "ftcc/tensor/ops.hpp"

namespace ftcc::nn {

class ElementwiseActivation : public Module {
 public:
  explicit ElementwiseActivation(tensor::Activation kind) : kind_(kind) {}
  tensor::Activation kind() const { return kind_; }
  Tensor forward(const Tensor& x) override;

 private:
  tensor::Activation kind_;
};

class ReLU : public ElementwiseActivation {
 public:
  ReLU() : ElementwiseActivation(tensor::Activation::relu) {}
  std::string type_name() const override { return "ReLU"; }
};

class Tanh : public ElementwiseActivation {
 public:
  Tanh() : ElementwiseActivation(tensor::Activation::tanh) {}
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public ElementwiseActivation {
 public:
  Sigmoid() : ElementwiseActivation(tensor::Activation::sigmoid) {}
  std::string type_name() const override { return "Sigmoid"; }
};

}  // namespace ftcc::nn
