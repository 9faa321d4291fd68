// Gradient check of every differentiable op against central finite differences in float64.
//
// Each case builds a scalar loss L = sum(op(inputs) * R) with a fixed random R (so every output
// element carries a distinct weight and a wrong index in a backward shows up), runs backward, and
// compares each input's gradient with (L(x + h e_i) - L(x - h e_i)) / 2h. Shapes are primes and
// other odd sizes so that no tile or vector width divides them. ReLU inputs are kept away from
// its kink at 0 (|x| >= 0.05), where the finite difference is not a derivative.
// Tolerance: with h = 1e-6 the truncation error is O(h^2 f''') ~ 1e-12 and the rounding error
// O(eps |L| / h) ~ 1e-10 for |L| ~ 1, so 1e-6 absolute + relative is a wide, still-failing band
// (a wrong gradient is off by O(1)).
#include <gtest/gtest.h>

#include <functional>

#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "test_util.hpp"

namespace ftcc::tensor {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor weighted_sum(const Tensor& y, std::uint64_t seed) {
  Tensor r = test::random_tensor(y.shape(), seed, 0.5, 1.5);
  return sum(mul(y, r));
}

void gradcheck(const char* name, const Fn& f, std::vector<Tensor> inputs) {
  SCOPED_TRACE(name);
  for (auto& x : inputs) x.requires_grad_(true);
  Tensor y = f(inputs);
  Tensor loss = y.numel() == 1 ? y : weighted_sum(y, 99);
  loss.backward();
  const double h = 1e-6;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    std::vector<double> analytic = x.grad().to_vector_f64();
    double* xp = x.data_as<double>();
    NoGradGuard ng;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      double keep = xp[i];
      xp[i] = keep + h;
      Tensor yp = f(inputs);
      double lp = (yp.numel() == 1 ? yp : weighted_sum(yp, 99)).item();
      xp[i] = keep - h;
      Tensor ym = f(inputs);
      double lm = (ym.numel() == 1 ? ym : weighted_sum(ym, 99)).item();
      xp[i] = keep;
      double numeric = (lp - lm) / (2 * h);
      ASSERT_NEAR(analytic[static_cast<std::size_t>(i)], numeric, 1e-6 * (1 + std::abs(numeric)))
          << "input " << k << " element " << i;
    }
  }
}

// Moves values away from 0 by at least `gap`, keeping the sign (for ReLU's kink).
Tensor away_from_zero(Tensor t, double gap) {
  double* p = t.data_as<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] += p[i] >= 0 ? gap : -gap;
  return t;
}

TEST(GradCheck, Matmul) {
  gradcheck("matmul", [](auto& in) { return matmul(in[0], in[1]); },
            {test::random_tensor({7, 13}, 1), test::random_tensor({13, 5}, 2)});
}

TEST(GradCheck, AddSameShape) {
  gradcheck("add", [](auto& in) { return add(in[0], in[1]); },
            {test::random_tensor({3, 11}, 3), test::random_tensor({3, 11}, 4)});
}

TEST(GradCheck, AddBiasBroadcast) {
  gradcheck("add bias", [](auto& in) { return add(in[0], in[1]); },
            {test::random_tensor({9, 7}, 5), test::random_tensor({7}, 6)});
}

TEST(GradCheck, Sub) {
  gradcheck("sub", [](auto& in) { return sub(in[0], in[1]); },
            {test::random_tensor({5, 3}, 7), test::random_tensor({5, 3}, 8)});
}

TEST(GradCheck, Mul) {
  gradcheck("mul", [](auto& in) { return mul(in[0], in[1]); },
            {test::random_tensor({2, 3, 5}, 9), test::random_tensor({2, 3, 5}, 10)});
}

TEST(GradCheck, SumAndMean) {
  gradcheck("sum", [](auto& in) { return sum(in[0]); }, {test::random_tensor({13, 3}, 11)});
  gradcheck("mean", [](auto& in) { return mean(in[0]); }, {test::random_tensor({13, 3}, 12)});
}

TEST(GradCheck, Activations) {
  gradcheck("relu", [](auto& in) { return relu(in[0]); }, {away_from_zero(test::random_tensor({7, 9}, 13), 0.05)});
  gradcheck("tanh", [](auto& in) { return tanh(in[0]); }, {test::random_tensor({7, 9}, 14, -3, 3)});
  gradcheck("sigmoid", [](auto& in) { return sigmoid(in[0]); }, {test::random_tensor({7, 9}, 15, -6, 6)});
}

TEST(GradCheck, Linear) {
  gradcheck("linear+bias", [](auto& in) { return linear(in[0], in[1], in[2]); },
            {test::random_tensor({11, 13}, 16), test::random_tensor({5, 13}, 17), test::random_tensor({5}, 18)});
  gradcheck("linear", [](auto& in) { return linear(in[0], in[1], Tensor()); },
            {test::random_tensor({11, 13}, 19), test::random_tensor({5, 13}, 20)});
}

TEST(GradCheck, LinearWithActivation) {
  const Tensor x = away_from_zero(test::random_tensor({11, 13}, 30), 0.05);
  const Tensor w = test::random_tensor({5, 13}, 31), b = test::random_tensor({5}, 32);
  for (auto act : {Activation::relu, Activation::tanh, Activation::sigmoid}) {
    gradcheck("linear+bias+activation", [act](auto& in) { return linear(in[0], in[1], in[2], act); },
              {x.clone(), w.clone(), b.clone()});
    gradcheck("linear+activation", [act](auto& in) { return linear(in[0], in[1], Tensor(), act); },
              {x.clone(), w.clone()});
  }
}

TEST(GradCheck, MseLoss) {
  Tensor target = test::random_tensor({7, 3}, 21);
  gradcheck("mse", [&](auto& in) { return mse_loss(in[0], target); }, {test::random_tensor({7, 3}, 22)});
}

// Soft targets (rows of positive weights that do not sum to 1, so the sum_j t_ij factor of the
// gradient is exercised), one-hot targets, one class, and a denominator other than the rows.
TEST(GradCheck, CrossEntropyLoss) {
  Tensor soft = test::random_tensor({7, 5}, 40, 0.0, 1.0);
  gradcheck("cross_entropy soft", [&](auto& in) { return cross_entropy_loss(in[0], soft); },
            {test::random_tensor({7, 5}, 41, -3, 3)});
  Tensor onehot = Tensor::zeros({6, 11}, DType::f64);
  for (std::int64_t i = 0; i < 6; ++i) onehot.data_as<double>()[i * 11 + (i * 7) % 11] = 1.0;
  gradcheck("cross_entropy one-hot", [&](auto& in) { return cross_entropy_loss(in[0], onehot, 23.0); },
            {test::random_tensor({6, 11}, 42, -3, 3)});
  Tensor one = test::random_tensor({4, 1}, 43, 0.5, 1.5);
  gradcheck("cross_entropy one class", [&](auto& in) { return cross_entropy_loss(in[0], one); },
            {test::random_tensor({4, 1}, 44)});
  gradcheck(
      "cross_entropy after linear", [&](auto& in) { return cross_entropy_loss(linear(in[0], in[1], in[2]), soft); },
      {test::random_tensor({7, 3}, 45), test::random_tensor({5, 3}, 46), test::random_tensor({5}, 47)});
}

TEST(GradCheck, RowSliceAndReuse) {
  // A row slice feeds the loss, and the same tensor is used twice: gradients must land only in
  // the sliced rows and accumulate over both uses.
  gradcheck("rows", [](auto& in) { return add(in[0].rows(2, 6), mul(in[0].rows(1, 5), in[0].rows(1, 5))); },
            {test::random_tensor({9, 4}, 23)});
}

TEST(GradCheck, TwoLayerMlpWithMse) {
  Tensor target = test::random_tensor({6, 3}, 24);
  gradcheck(
      "mlp",
      [&](auto& in) {
        Tensor h = tanh(linear(in[0], in[1], in[2]));
        return mse_loss(sigmoid(linear(h, in[3], in[4])), target);
      },
      {test::random_tensor({6, 5}, 25), test::random_tensor({7, 5}, 26), test::random_tensor({7}, 27),
       test::random_tensor({3, 7}, 28), test::random_tensor({3}, 29)});
}

}  // namespace
}  // namespace ftcc::tensor
