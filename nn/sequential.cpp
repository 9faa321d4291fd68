#include "ftcc/nn/sequential.hpp"

#include <string>
#include <typeinfo>

#include "ftcc/base/error.hpp"
#include "ftcc/nn/activation.hpp"

namespace ftcc::nn {

namespace {
// m as a T when its dynamic type is T itself (not a class derived from T), else null.
template <class T>
T* exactly(Module* m) {
  return m != nullptr && typeid(*m) == typeid(T) ? static_cast<T*>(m) : nullptr;
}
}  // namespace

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  register_module(std::to_string(children().size()), std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const auto& kids = children();
  for (std::size_t i = 0; i < kids.size(); ++i) {
    // A Linear followed by an activation runs as one fused op (same bits as the two in turn).
    // Only the library's own classes, exactly: a subclass may override forward(), which the
    // fused op would skip.
    auto* linear = exactly<Linear>(kids[i].second.get());
    ElementwiseActivation* act = nullptr;
    if (i + 1 < kids.size()) {
      Module* next = kids[i + 1].second.get();
      if (auto* a = exactly<ReLU>(next)) act = a;
      else if (auto* t = exactly<Tanh>(next)) act = t;
      else if (auto* g = exactly<Sigmoid>(next)) act = g;
    }
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
