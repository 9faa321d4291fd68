// nn/sequential.hpp: a chain of modules named "0", "1", ... (PyTorch's naming), and mlp(), the
// helper that builds Linear/activation stacks initialised from one seed. forward() runs each
// Linear that an activation follows as one fused op (nn/activation.hpp).
//
//   auto model = nn::mlp({64, 64, 10}, nn::Activation::ReLU, /*seed=*/42);
//   // == Sequential{Linear(64,64), ReLU, Linear(64,10)}, parameters 0.weight 0.bias 2.weight 2.bias
#pragma once

#include <memory>
#include <vector>

#include "ftcc/nn/linear.hpp"
#include "ftcc/nn/module.hpp"

namespace ftcc::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Module> m);
  template <class M, class... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  std::size_t size() const { return children().size(); }
  Module& operator[](std::size_t i) const { return *children().at(i).second; }
};

enum class Activation { ReLU, Tanh, Sigmoid };

// Linear layers of the given widths with `act` between them (none after the last), initialised
// by reset_parameters(seed): layer i uses mix_seed(seed, i).
std::shared_ptr<Sequential> mlp(const std::vector<std::int64_t>& widths, Activation act, std::uint64_t seed,
                                Init init = Init::KaimingUniform);

}  // namespace ftcc::nn
