// nn/linear.hpp: y = x W^T + b with W [out, in] and b [out] (PyTorch's layout and names "weight",
// "bias"), computed by the fused tensor::linear op (one GEMM, bias in its epilogue).
//
// Initialisation from our own Philox stream, so that every rank and platform gets the same bits
// for the same seed: weight uses stream 0 of the layer's seed, bias stream 1.
//   KaimingUniform (PyTorch's default for Linear): W, b ~ U(-1/sqrt(in), 1/sqrt(in))
//   XavierUniform:  W ~ U(-a, a), a = sqrt(6 / (in + out)); b = 0
//   KaimingNormal (He, for ReLU stacks): W ~ N(0, 2 / in); b = 0
#pragma once

#include <cstdint>

#include "ftcc/nn/module.hpp"
#include "ftcc/tensor/ops.hpp"

namespace ftcc::nn {

enum class Init { KaimingUniform, XavierUniform, KaimingNormal };

struct LinearOptions {
  bool bias = true;
  Init init = Init::KaimingUniform;
  std::uint64_t seed = 0;
};

class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, LinearOptions options = {});
  Tensor forward(const Tensor& x) override;
  // act(forward(x)) as one fused op (tensor::linear with an activation): same bits, one pass less.
  Tensor forward(const Tensor& x, tensor::Activation act);
  std::string type_name() const override { return "Linear"; }
  void reset_parameters(std::uint64_t seed) override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined when options.bias is false
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

 private:
  std::int64_t in_, out_;
  Init init_;
  Tensor weight_, bias_;
};

}  // namespace ftcc::nn
