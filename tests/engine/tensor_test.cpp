// Tensor basics: views share storage, autograd bookkeeping (accumulation, zero_grad keeping the
// buffer, no-grad scope), micro-batch gradients adding up to the batch gradient, errors, Philox.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/types.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/random.hpp"
#include "test_util.hpp"

namespace ftcc::tensor {
namespace {

TEST(Tensor, RowViewsShareStorage) {
  Tensor t = Tensor::zeros({5, 3});
  Tensor v = t.rows(1, 3);
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.data(), t.data() + 3);
  v.fill_(7.0);
  std::vector<float> all = t.to_vector();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(all[i], (i >= 3 && i < 9) ? 7.0f : 0.0f) << i;
  EXPECT_EQ(v.rows(1, 2).data(), t.data() + 6);  // views of views keep the offset
}

TEST(Tensor, CloneAndConversionsCopy) {
  std::vector<float> vals{1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_vector({2, 3}, std::span<const float>(vals));
  Tensor c = t.clone();
  c.fill_(0);
  EXPECT_EQ(t.to_vector(), vals);
  Tensor d = t.to(DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.to_vector_f64()[5], 6.0);
}

TEST(Tensor, ErrorsNameTheProblem) {
  Tensor t = Tensor::zeros({4, 3});
  EXPECT_THROW(t.rows(2, 5), InvalidArgument);
  EXPECT_THROW(t.data_as<double>(), InvalidArgument);
  EXPECT_THROW(Tensor::zeros({1, 1, 1, 1, 1}), InvalidArgument);
  try {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 2}));
    FAIL() << "matmul of mismatched shapes did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3] x [4, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}, DType::f64)), InvalidArgument);
}

// One DType for comm and tensor (base/dtype.hpp): the integer types exist for the collectives,
// a tensor refuses them by name.
TEST(Tensor, RefusesIntegerDtypes) {
  static_assert(std::is_same_v<DType, comm::DType>);
  for (DType t : {DType::i32, DType::i64}) {
    try {
      Tensor::zeros({2}, t);
      FAIL() << "a tensor of " << dtype_name(t) << " was made";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(dtype_name(t)), std::string::npos) << e.what();
    }
  }
}

TEST(Autograd, GradientsAccumulateAndZeroGradKeepsTheBuffer) {
  Tensor w = test::random_tensor({3, 2}, 1, -1, 1, DType::f32);
  w.requires_grad_();
  float* gptr = w.grad().data();
  Tensor x = test::random_tensor({4, 3}, 2, -1, 1, DType::f32);
  sum(matmul(x, w)).backward();
  std::vector<float> once = w.grad().to_vector();
  sum(matmul(x, w)).backward();
  std::vector<float> twice = w.grad().to_vector();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  w.zero_grad();
  EXPECT_EQ(w.grad().data(), gptr);
  for (float g : w.grad().to_vector()) EXPECT_EQ(g, 0.0f);
}

// The gradient arena of train/gradient_reducer.hpp: views into one buffer become the gradient
// buffers, backward accumulates into them, and each leaf's hook runs once per backward.
TEST(Autograd, GradientBuffersInOneArenaAndHooks) {
  Tensor arena = Tensor::zeros({10});
  Tensor w = test::random_tensor({3, 2}, 1, -1, 1, DType::f32), b = test::random_tensor({2}, 3, -1, 1, DType::f32);
  w.requires_grad_();
  b.requires_grad_();
  Tensor x = test::random_tensor({4, 3}, 2, -1, 1, DType::f32);
  sum(add(matmul(x, w), b)).backward();
  const std::vector<float> before = w.grad().to_vector();
  w.set_grad_buffer(arena.view(2, {3, 2}));  // the current gradient moves along
  b.set_grad_buffer(arena.view(8, {2}));
  EXPECT_EQ(w.grad().data(), arena.data() + 2);
  EXPECT_EQ(w.grad().to_vector(), before);
  int w_hooks = 0, b_hooks = 0;
  w.set_grad_hook([&] { ++w_hooks; });
  b.set_grad_hook([&] { ++b_hooks; });
  sum(add(matmul(x, w), b)).backward();
  EXPECT_EQ(w_hooks, 1);
  EXPECT_EQ(b_hooks, 1);
  const std::vector<float> all = arena.to_vector();
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_FLOAT_EQ(all[2 + i], 2 * before[i]);
  EXPECT_EQ(all[0], 0.0f);  // outside every view: untouched
  EXPECT_EQ(all[1], 0.0f);
  w.zero_grad();
  for (std::size_t i = 2; i < 8; ++i) EXPECT_EQ(arena.to_vector()[i], 0.0f);
  // A leaf taken twice by one graph: one hook call, after both contributions.
  float seen = 0;
  w.set_grad_hook([&] { ++w_hooks; seen = w.grad().to_vector()[0]; });
  w.zero_grad();
  sum(add(matmul(x, w), matmul(x, w))).backward();
  EXPECT_EQ(w_hooks, 2);
  EXPECT_FLOAT_EQ(seen, 2 * before[0]);
  w.set_grad_hook(nullptr);
  sum(matmul(x, w)).backward();
  EXPECT_EQ(w_hooks, 2);
  // Views stay inside their tensor; a buffer must match the leaf; only leaves take one.
  EXPECT_THROW(arena.view(8, {3}), InvalidArgument);
  EXPECT_THROW(w.set_grad_buffer(arena.view(0, {2, 3})), InvalidArgument);
  EXPECT_THROW(matmul(x, w).set_grad_buffer(arena.view(0, {4, 2})), InvalidArgument);
  EXPECT_FALSE(arena.view(0, {2}).requires_grad());
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor w = Tensor::zeros({2, 2});
  w.requires_grad_();
  {
    NoGradGuard g;
    Tensor y = matmul(w, w);
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_TRUE(matmul(w, w).requires_grad());
  Tensor c = Tensor::zeros({1});
  EXPECT_THROW(c.backward(), InvalidArgument);  // nothing to differentiate
}

TEST(Autograd, MicroBatchGradientsSumToTheBatchGradient) {
  // The data-parallel contract: with mse_loss(pred, y, B * outputs) per micro-batch, the sum of
  // micro-batch gradients equals the gradient of mse_loss over the whole batch of B rows.
  const std::int64_t B = 23, in = 7, out = 3;
  Tensor x = test::random_tensor({B, in}, 3, -1, 1), y = test::random_tensor({B, out}, 4, -1, 1);
  Tensor w = test::random_tensor({out, in}, 5), b = test::random_tensor({out}, 6);
  w.requires_grad_();
  b.requires_grad_();
  mse_loss(tanh(linear(x, w, b)), y).backward();
  std::vector<double> full_w = w.grad().to_vector_f64(), full_b = b.grad().to_vector_f64();
  w.zero_grad();
  b.zero_grad();
  for (std::int64_t s = 0; s < B; s += 5) {
    std::int64_t e = std::min(B, s + 5);
    mse_loss(tanh(linear(x.rows(s, e), w, b)), y.rows(s, e), static_cast<double>(B * out)).backward();
  }
  std::vector<double> mw = w.grad().to_vector_f64(), mb = b.grad().to_vector_f64();
  for (std::size_t i = 0; i < mw.size(); ++i) EXPECT_NEAR(mw[i], full_w[i], 1e-12);
  for (std::size_t i = 0; i < mb.size(); ++i) EXPECT_NEAR(mb[i], full_b[i], 1e-12);
}

TEST(CrossEntropy, KnownValues) {
  // One row: logits (1, 2, 3), class 2: log(e + e^2 + e^3) - 3 = log(e^-2 + e^-1 + 1).
  const double want = std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  Tensor x = Tensor::from_vector({1, 3}, std::vector<float>{1, 2, 3});
  Tensor t = Tensor::from_vector({1, 3}, std::vector<float>{0, 0, 1});
  EXPECT_NEAR(cross_entropy_loss(x, t).item(), want, 1e-6);
  // Equal logits: log C for any one-hot target; the mean over rows.
  Tensor u = Tensor::zeros({4, 10}), y = Tensor::zeros({4, 10});
  for (int i = 0; i < 4; ++i) y.data_as<float>()[i * 10 + 3 * i] = 1;
  EXPECT_NEAR(cross_entropy_loss(u, y).item(), std::log(10.0), 1e-6);
  // Soft targets: -sum_j t_j log_softmax_j, with a target row summing to 2 counted twice.
  Tensor soft = Tensor::from_vector({1, 3}, std::vector<float>{0.5f, 0.5f, 1.0f});
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(cross_entropy_loss(x, soft).item(), 0.5 * (lse - 1) + 0.5 * (lse - 2) + (lse - 3), 1e-5);
  // A denominator: the sum of the rows' losses over it.
  EXPECT_NEAR(cross_entropy_loss(u, y, 8.0).item(), std::log(10.0) / 2, 1e-6);
}

TEST(CrossEntropy, StableForLogitsFarFromZero) {
  // exp(1000) overflows float and double: the shifted log-sum-exp must not. The loss of the right
  // class is 0, of a class 2000 below the top 2000; the gradient is softmax - t.
  Tensor x = Tensor::from_vector({2, 3}, std::vector<float>{1000, -1000, 0, -1e4f, -1e4f, -1e4f});
  Tensor t = Tensor::from_vector({2, 3}, std::vector<float>{0, 1, 0, 1, 0, 0});
  x.requires_grad_();
  Tensor l = cross_entropy_loss(x, t);
  EXPECT_NEAR(l.item(), (2000.0 + std::log(3.0)) / 2, 1e-3);
  l.backward();
  const auto g = x.grad().to_vector();
  const std::vector<float> want{0.5f, -0.5f, 0, (1.0f / 3 - 1) / 2, 1.0f / 6, 1.0f / 6};
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << i;
}

TEST(CrossEntropy, MicroBatchGradientsSumToTheBatchGradient) {
  // As for MSE: with cross_entropy_loss(logits, t, B) per micro-batch, the micro-batches'
  // gradients add up to the whole batch's.
  const std::int64_t B = 23, in = 7, out = 4;
  Tensor x = test::random_tensor({B, in}, 13, -1, 1), t = test::random_tensor({B, out}, 14, 0, 1);
  Tensor w = test::random_tensor({out, in}, 15);
  w.requires_grad_();
  cross_entropy_loss(linear(x, w, Tensor()), t).backward();
  const std::vector<double> full = w.grad().to_vector_f64();
  w.zero_grad();
  for (std::int64_t s = 0; s < B; s += 5)
    cross_entropy_loss(linear(x.rows(s, std::min(B, s + 5)), w, Tensor()), t.rows(s, std::min(B, s + 5)),
                       static_cast<double>(B))
        .backward();
  const std::vector<double> parts = w.grad().to_vector_f64();
  for (std::size_t i = 0; i < parts.size(); ++i) EXPECT_NEAR(parts[i], full[i], 1e-12);
}

TEST(CrossEntropy, BadShapesAreRefusedWithTheShapes) {
  const auto message = [](const Tensor& x, const Tensor& t) {
    try {
      cross_entropy_loss(x, t);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_THAT(message(Tensor::zeros({5}), Tensor::zeros({5})), testing::HasSubstr("logits must be [rows, classes]"));
  EXPECT_THAT(message(Tensor::zeros({0, 3}), Tensor::zeros({0, 3})), testing::HasSubstr("got [0, 3]"));
  EXPECT_THAT(message(Tensor::zeros({4, 3}), Tensor::zeros({4})),
              testing::HasSubstr("target [4] must have the logits' shape [4, 3]"));
  EXPECT_THAT(message(Tensor::zeros({4, 3}), Tensor::zeros({4, 3}, DType::f64)), testing::HasSubstr("dtypes differ"));
  EXPECT_THROW(cross_entropy_loss(Tensor::zeros({4, 3}), Tensor::zeros({4, 3}), 0.0), InvalidArgument);
}

TEST(Philox, MatchesThePublishedKnownAnswers) {
  // Random123's kat_vectors for philox4x32_10: counter and key all zero, and all ones.
  auto zero = Philox(0, 0).block(0);
  EXPECT_EQ(zero, (std::array<std::uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  auto ones = Philox(~0ull, ~0ull).block(~0ull);
  EXPECT_EQ(ones, (std::array<std::uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

// The fill helpers compute each block once; their values are the element-wise functions' exactly
// (initial weights and synthetic data of every earlier run stay what they were).
TEST(Philox, BlockwiseFillsEqualTheElementwiseFunctions) {
  const Philox r(42, 9);
  std::vector<float> u(103), n(103);  // not a multiple of 4: the last block is cut
  r.fill_uniform(u, -0.5f, 2.0f);
  r.fill_normal(n, 1.0f, 3.0f);
  for (std::size_t k = 0; k < u.size(); ++k) {
    ASSERT_EQ(u[k], -0.5f + 2.5f * r.uniform(k)) << k;
    const double u1 = 1.0 - r.uniform_f64(2 * k), u2 = r.uniform_f64(2 * k + 1);
    ASSERT_EQ(n[k], static_cast<float>(1.0 + 3.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2))) << k;
    const auto pair = r.uniform_f64_pair(k);
    ASSERT_EQ(pair[0], r.uniform_f64(2 * k));
    ASSERT_EQ(pair[1], r.uniform_f64(2 * k + 1));
  }
}

// The fast normals: Box-Muller of the documented bits (within float rounding of libm's double
// math), any split of a range gives the same bits, and the law is N(0, 1).
TEST(Philox, FastStandardNormalsAreBoxMullerOfTheirPositionAndSplitFree) {
  const Philox r(7, 3);
  std::vector<float> all(1001);  // odd length: partial blocks at the end
  r.fill_standard_normal_fast(5, all);  // starts inside a block
  for (std::size_t k = 0; k < all.size(); ++k) {
    const std::uint64_t j = 5 + k;
    const auto b = r.block(j / 4);
    const std::size_t p = (j % 4) / 2;  // pair within the block: words 2p, 2p + 1
    const double u1 = static_cast<double>((b[2 * p] >> 8) + 1) * 0x1.0p-24, u2 = static_cast<double>(b[2 * p + 1] >> 8) * 0x1.0p-24;
    const double rad = std::sqrt(-2.0 * std::log(u1)), theta = 2.0 * M_PI * u2;
    const double want = rad * (j % 2 == 0 ? std::cos(theta) : std::sin(theta));
    ASSERT_NEAR(all[k], want, 2e-6 * std::max(1.0, std::abs(want))) << "position " << j;
  }
  // Pieces of any length, starting anywhere, give the same bits as one call.
  for (std::size_t cut : {1u, 3u, 4u, 517u, 1000u}) {
    std::vector<float> a(cut), b(all.size() - cut);
    r.fill_standard_normal_fast(5, a);
    r.fill_standard_normal_fast(5 + cut, b);
    for (std::size_t k = 0; k < all.size(); ++k) ASSERT_EQ(k < cut ? a[k] : b[k - cut], all[k]) << cut << " " << k;
  }
}

TEST(Philox, FastStandardNormalsHaveTheStandardLaw) {
  constexpr std::size_t n = 1 << 20;
  std::vector<float> z(n);
  Philox(11).fill_standard_normal_fast(0, z);
  double sum = 0, sq = 0;
  std::size_t below = 0, above = 0;
  for (float v : z) {
    sum += v;
    sq += static_cast<double>(v) * v;
    below += v < -1.959964f;
    above += v > 1.0f;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  // 5 standard errors: mean 1/sqrt(n) ~ 1e-3, variance sqrt(2/n) ~ 1.4e-3, tail fractions
  // sqrt(p(1-p)/n) ~ 1.5e-4 (p = 0.025) and 3.6e-4 (p = 0.1587).
  EXPECT_NEAR(mean, 0.0, 5e-3);
  EXPECT_NEAR(var, 1.0, 7e-3);
  EXPECT_NEAR(static_cast<double>(below) / n, 0.025, 7.7e-4);
  EXPECT_NEAR(static_cast<double>(above) / n, 0.158655, 1.8e-3);
}

TEST(Philox, BelowIsUnbiasedEnoughAndInRange) {
  Philox r(42);
  std::uint64_t pos = 0;
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) {
    auto v = r.below(7, pos, &pos);
    ASSERT_LT(v, 7u);
    ++counts[v];
  }
  // Each bin expects 10000 with sd ~93; 5 sd is a band no correct generator leaves.
  for (int c : counts) EXPECT_NEAR(c, 10000, 470);
}

}  // namespace
}  // namespace ftcc::tensor

// tensor/storage.hpp: the CPU tensor memory counters (live and peak bytes of storages).
TEST(TensorMemory, CountsLiveAndPeakBytes) {
  using ftcc::tensor::cpu_tensor_memory;
  const auto before = cpu_tensor_memory();
  ftcc::tensor::reset_peak_cpu_tensor_memory();
  EXPECT_EQ(cpu_tensor_memory().peak, before.live);
  {
    auto a = ftcc::tensor::Tensor::zeros({1000, 25});  // 100000 bytes
    EXPECT_EQ(cpu_tensor_memory().live, before.live + 100000);
    auto view = a.rows(10, 20);  // a view holds no storage of its own
    EXPECT_EQ(cpu_tensor_memory().live, before.live + 100000);
  }
  EXPECT_EQ(cpu_tensor_memory().live, before.live);
  EXPECT_EQ(cpu_tensor_memory().peak, before.live + 100000);
  ftcc::tensor::reset_peak_cpu_tensor_memory();
  EXPECT_EQ(cpu_tensor_memory().peak, before.live);
}
