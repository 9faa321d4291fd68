#include "ftcc/nn/sequential.hpp"

#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/nn/activation.hpp"

namespace ftcc::nn {

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  register_module(std::to_string(children().size()), std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const auto& kids = children();
  for (std::size_t i = 0; i < kids.size(); ++i) {
    // A Linear followed by an activation runs as one fused op (same bits as the two in turn).
    auto* linear = dynamic_cast<Linear*>(kids[i].second.get());
    auto* act = i + 1 < kids.size() ? dynamic_cast<ElementwiseActivation*>(kids[i + 1].second.get()) : nullptr;
    if (linear != nullptr && act != nullptr) {
      h = linear->forward(h, act->kind());
      ++i;
    } else {
      h = kids[i].second->forward(h);
    }
  }
  return h;
}

std::shared_ptr<Sequential> mlp(const std::vector<std::int64_t>& widths, Activation act, std::uint64_t seed,
                                Init init) {
  FTCC_CHECK(widths.size() >= 2) << "mlp: need at least input and output widths";
  auto model = std::make_shared<Sequential>();
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    model->emplace<Linear>(widths[i], widths[i + 1], LinearOptions{.bias = true, .init = init});
    if (i + 2 < widths.size()) {
      switch (act) {
        case Activation::ReLU: model->emplace<ReLU>(); break;
        case Activation::Tanh: model->emplace<Tanh>(); break;
        case Activation::Sigmoid: model->emplace<Sigmoid>(); break;
      }
    }
  }
  model->reset_parameters(seed);
  return model;
}

}  // namespace ftcc::nn
