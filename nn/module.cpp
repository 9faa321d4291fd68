#include "ftcc/nn/module.hpp"

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/random.hpp"

namespace ftcc::nn {

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::int64_t Module::num_parameters() const { return total_numel(named_parameters()); }

void Module::zero_grad() const {
  for (const auto& t : parameters()) t.zero_grad();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::reset_parameters(std::uint64_t seed) {
  // Children get independent streams derived from the seed and their position.
  std::uint64_t i = 0;
  for (auto& [name, child] : children_) child->reset_parameters(tensor::mix_seed(seed, i++));
}

void Module::to(tensor::Device device) {
  for (auto& [name, t] : named_parameters()) {
    if (t.device() == device) continue;
    // Swap the storage under the existing impl so that every handle (optimizer, trainer) follows.
    tensor::TensorImpl* impl = t.impl();
    Tensor moved = t.to(device);
    impl->storage = moved.impl()->storage;
    impl->offset = 0;
    if (impl->grad) {
      Tensor g(impl->grad);
      Tensor gm = g.to(device);
      impl->grad->storage = gm.impl()->storage;
      impl->grad->offset = 0;
    }
  }
}

Tensor Module::register_parameter(std::string name, Tensor t) {
  for (const auto& [n, p] : params_) FTCC_CHECK(n != name) << "parameter '" << name << "' registered twice";
  t.requires_grad_(true);
  params_.emplace_back(std::move(name), t);
  return t;
}

void Module::register_module(std::string name, std::shared_ptr<Module> child) {
  FTCC_CHECK(child != nullptr) << "register_module('" << name << "', nullptr)";
  children_.emplace_back(std::move(name), std::move(child));
}

}  // namespace ftcc::nn
