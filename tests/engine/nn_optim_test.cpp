// nn and optim: parameter names and order, seeded initialisation, flat buffers, and optimizer
// updates against a float64 re-implementation of PyTorch's update rules.
#include <gtest/gtest.h>

#include <cmath>

#include "ftcc/base/error.hpp"
#include "ftcc/nn/activation.hpp"
#include "ftcc/nn/linear.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "test_util.hpp"

namespace ftcc {
namespace {

using tensor::Tensor;

TEST(Module, NamesFollowPyTorchAndOrderIsCanonical) {
  auto m = nn::mlp({5, 4, 3}, nn::Activation::Tanh, 1);
  auto named = m->named_parameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "0.weight");
  EXPECT_EQ(named[1].first, "0.bias");
  EXPECT_EQ(named[2].first, "2.weight");
  EXPECT_EQ(named[3].first, "2.bias");
  EXPECT_EQ(named[0].second.shape(), (tensor::Shape{4, 5}));
  EXPECT_EQ(m->num_parameters(), 4 * 5 + 4 + 3 * 4 + 3);
}

TEST(Module, SameSeedSameBitsDifferentSeedDifferent) {
  auto a = nn::mlp({7, 6, 2}, nn::Activation::ReLU, 123);
  auto b = nn::mlp({7, 6, 2}, nn::Activation::ReLU, 123);
  auto c = nn::mlp({7, 6, 2}, nn::Activation::ReLU, 124);
  auto fa = nn::flatten_f32(a->named_parameters()), fb = nn::flatten_f32(b->named_parameters()),
       fc = nn::flatten_f32(c->named_parameters());
  EXPECT_EQ(fa, fb);
  EXPECT_NE(fa, fc);
  // Kaiming-uniform bound 1/sqrt(fan_in) for the first layer.
  for (int i = 0; i < 42; ++i) EXPECT_LE(std::abs(fa[i]), 1 / std::sqrt(7.0f));
}

// Sequential runs Linear + activation as one fused op; the values and every gradient must be the
// bits of the two ops run in turn (the trainers' SHA comparisons across dp, pp and tp rely on it).
// Odd widths put elements in Eigen's vector tails.
TEST(Sequential, FusedLinearActivationHasTheBitsOfTheTwoOps) {
  for (auto act : {nn::Activation::ReLU, nn::Activation::Tanh, nn::Activation::Sigmoid}) {
    SCOPED_TRACE(static_cast<int>(act));
    auto fused = nn::mlp({37, 53, 29, 3}, act, 5);
    auto plain = nn::mlp({37, 53, 29, 3}, act, 5);
    const Tensor x = test::random_tensor({19, 37}, 6, -2, 2, tensor::DType::f32);
    const Tensor y = test::random_tensor({19, 3}, 7, -1, 1, tensor::DType::f32);
    // The reference: each child's own forward, one after the other.
    Tensor h = x;
    for (std::size_t i = 0; i < plain->size(); ++i) h = (*plain)[i].forward(h);
    tensor::mse_loss(h, y).backward();
    Tensor out = (*fused)(x);
    tensor::mse_loss(out, y).backward();
    EXPECT_EQ(out.to_vector(), h.to_vector());
    const auto pf = fused->named_parameters(), pp = plain->named_parameters();
    for (std::size_t i = 0; i < pf.size(); ++i)
      EXPECT_EQ(pf[i].second.grad().to_vector(), pp[i].second.grad().to_vector()) << pf[i].first;
  }
}

// A class derived from Linear or from an activation keeps its own forward(): Sequential fuses only
// the library's own classes.
TEST(Sequential, ASubclassOfAnActivationIsNotFusedAway) {
  struct CappedReLU : nn::ReLU {
    Tensor forward(const Tensor& x) override { return tensor::mul(tensor::relu(x), tensor::Tensor::full(x.shape(), 0.5)); }
  };
  struct ScaledLinear : nn::Linear {
    using nn::Linear::Linear;
    Tensor forward(const Tensor& x) override { return tensor::mul(nn::Linear::forward(x), tensor::Tensor::full({x.size(0), out_features()}, 2.0)); }
  };
  const Tensor x = test::random_tensor({5, 4}, 8, -1, 1, tensor::DType::f32);
  nn::Sequential plain, capped, scaled;
  plain.emplace<nn::Linear>(4, 3, nn::LinearOptions{.seed = 1}).emplace<nn::ReLU>();
  capped.emplace<nn::Linear>(4, 3, nn::LinearOptions{.seed = 1}).emplace<CappedReLU>();
  scaled.emplace<ScaledLinear>(4, 3, nn::LinearOptions{.seed = 1}).emplace<nn::ReLU>();
  const auto p = plain(x).to_vector(), c = capped(x).to_vector(), s = scaled(x).to_vector();
  bool some_positive = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(c[i], p[i] * 0.5f) << i;
    EXPECT_EQ(s[i], p[i] * 2.0f) << i;
    some_positive = some_positive || p[i] > 0;
  }
  EXPECT_TRUE(some_positive);
}

TEST(Module, InitialisationIsPinned) {
  // Pinned bits: a change in Philox, the uniform mapping or the seed derivation changes every
  // rank's initial weights and must be deliberate.
  nn::Linear l(3, 2, {.seed = 7});
  std::vector<float> w = l.weight().to_vector();
  tensor::Philox r(7, 0);
  float bound = 1 / std::sqrt(3.0f);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w[i], -bound + 2 * bound * r.uniform(i));
  EXPECT_EQ(tensor::Philox(7, 0).bits(0), tensor::Philox(7, 0).block(0)[0]);
}

TEST(NamedTensors, FlattenPackAndUnpackRoundTrip) {
  auto m = nn::mlp({4, 3, 2}, nn::Activation::ReLU, 5);
  auto params = m->named_parameters();
  std::vector<float> flat = nn::flatten_f32(params);
  std::vector<std::byte> bytes = nn::pack_bytes(params);
  for (auto& v : flat) v *= 2;
  nn::unflatten_f32(params, flat);
  EXPECT_EQ(nn::flatten_f32(params), flat);
  nn::unpack_bytes(params, bytes);
  for (std::size_t i = 0; i < flat.size(); ++i) EXPECT_EQ(nn::flatten_f32(params)[i] * 2, flat[i]);
  EXPECT_THROW(nn::unflatten_f32(params, std::span<const float>(flat).first(3)), InvalidArgument);
  // The data pointers a trainer allreduces are the parameters' own gradient buffers.
  auto grads = nn::gradients_of(params);
  EXPECT_EQ(grads[0].second.data(), params[0].second.grad().data());
}

// One parameter vector p with a fixed gradient sequence g_t; reference updates in double.
struct Trace {
  std::vector<double> p;
  std::vector<std::vector<double>> grads;
};

Trace make_trace(int n, int steps) {
  Trace t;
  tensor::Philox r(9);
  for (int i = 0; i < n; ++i) t.p.push_back(r.uniform_f64(i) * 2 - 1);
  for (int s = 0; s < steps; ++s) {
    std::vector<double> g;
    for (int i = 0; i < n; ++i) g.push_back(r.uniform_f64(1000 + s * n + i) * 2 - 1);
    t.grads.push_back(g);
  }
  return t;
}

template <class MakeOpt, class Ref>
void compare(const MakeOpt& make, const Ref& ref_step) {
  const int n = 13, steps = 6;
  Trace tr = make_trace(n, steps);
  std::vector<float> pf(tr.p.begin(), tr.p.end());
  Tensor p = Tensor::from_vector({n}, std::span<const float>(pf));
  p.requires_grad_();
  auto opt = make(nn::NamedTensors{{"p", p}});
  std::vector<double> ref = tr.p, s1(n, 0.0), s2(n, 0.0);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> gf(tr.grads[s].begin(), tr.grads[s].end());
    p.grad().copy_(Tensor::from_vector({n}, std::span<const float>(gf)));
    opt->step();
    ref_step(s + 1, ref, tr.grads[s], s1, s2);
    std::vector<float> got = p.to_vector();
    // float32 arithmetic against float64: a few ulp of values of size ~1 per step.
    for (int i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-5) << "step " << s + 1 << " element " << i;
  }
  EXPECT_EQ(opt->step_count(), steps);
}

TEST(SGD, MomentumNesterovAndWeightDecayMatchTheReference) {
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "heavy ball");
    const double lr = 0.1, mu = 0.9, wd = 0.01;
    compare([&](nn::NamedTensors ps) {
      return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = lr, .momentum = mu, .weight_decay = wd, .nesterov = nesterov});
    },
            [&](int t, std::vector<double>& p, const std::vector<double>& g, std::vector<double>& buf, std::vector<double>&) {
              for (std::size_t i = 0; i < p.size(); ++i) {
                double d = g[i] + wd * p[i];
                buf[i] = t == 1 ? d : mu * buf[i] + d;
                p[i] -= lr * (nesterov ? d + mu * buf[i] : buf[i]);
              }
            });
  }
}

TEST(Adam, AdamAndAdamWMatchTheReference) {
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    compare([&](nn::NamedTensors ps) {
      return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = lr, .weight_decay = wd, .decoupled_weight_decay = decoupled});
    },
            [&](int t, std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m, std::vector<double>& v) {
              for (std::size_t i = 0; i < p.size(); ++i) {
                double gi = g[i];
                if (decoupled) p[i] *= 1 - lr * wd;
                else gi += wd * p[i];
                m[i] = b1 * m[i] + (1 - b1) * gi;
                v[i] = b2 * v[i] + (1 - b2) * gi * gi;
                double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
                p[i] -= lr * mh / (std::sqrt(vh) + eps);
              }
            });
  }
}

TEST(Adam, SecondMomentKeepsOneMinusBetaExact) {
  // v after one step is (1 - beta2) g^2. With 1 - beta2 computed in float (1.0f - 0.999f) it is
  // 1.29e-5 too small (relative): far above float's 6e-8, which this bound allows for.
  const int n = 5;
  std::vector<float> ones(n, 1.0f), gs = {0.5f, -1.25f, 2.0f, 3.0f, -0.75f};
  Tensor p = Tensor::from_vector({n}, std::span<const float>(ones));
  p.requires_grad_();
  optim::Adam opt(nn::NamedTensors{{"p", p}}, optim::AdamOptions{.lr = 0.01});
  p.grad().copy_(Tensor::from_vector({n}, std::span<const float>(gs)));
  opt.step();
  Tensor v, m;
  for (const auto& [name, t] : opt.state_dict()) {
    if (name == "p.exp_avg_sq") v = t;
    if (name == "p.exp_avg") m = t;
  }
  const auto vv = v.to_vector(), mm = m.to_vector();
  for (int i = 0; i < n; ++i) {
    const double g = gs[static_cast<size_t>(i)];
    EXPECT_NEAR(vv[static_cast<size_t>(i)], (1 - 0.999) * g * g, 1e-6 * (1 - 0.999) * g * g) << i;
    EXPECT_NEAR(mm[static_cast<size_t>(i)], (1 - 0.9) * g, 1e-6 * std::abs((1 - 0.9) * g)) << i;
  }
}

TEST(Optimizer, StateDictIsLiveAndLoadable) {
  auto m = nn::mlp({3, 2}, nn::Activation::ReLU, 1);
  optim::Adam a(m->named_parameters(), {});
  auto sd = a.state_dict();
  ASSERT_EQ(sd.size(), 1u + 2 * 2);
  EXPECT_EQ(sd[0].first, "step");
  EXPECT_EQ(sd[1].first, "0.weight.exp_avg");
  EXPECT_EQ(sd[2].first, "0.weight.exp_avg_sq");
  Tensor x = test::random_tensor({4, 3}, 1, -1, 1, tensor::DType::f32);
  tensor::sum((*m)(x)).backward();
  a.step();
  EXPECT_EQ(sd[0].second.item(), 1.0);
  EXPECT_NE(sd[1].second.to_vector()[0], 0.0f);  // live handle sees the update
  // Import into a fresh optimizer of the same shape.
  auto m2 = nn::mlp({3, 2}, nn::Activation::ReLU, 1);
  optim::Adam b(m2->named_parameters(), {});
  b.load_state_dict(sd);
  EXPECT_EQ(nn::pack_bytes(b.state_dict()), nn::pack_bytes(sd));
  EXPECT_EQ(b.step_count(), 1);
  optim::SGD s(m2->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(s.load_state_dict(sd), InvalidArgument);
}

}  // namespace
}  // namespace ftcc
