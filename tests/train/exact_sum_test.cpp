// The exact sum: same bits whatever the grouping and order of the contributions, no overflow at
// the bound, and precision relative to the largest value as documented in train/exact_sum.hpp;
// NaN and infinity are refused, never turned into fixed-point garbage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/train/run_common.hpp"
#include "ftcc/train/exact_sum.hpp"

namespace ft = ftcc::train;

namespace {

std::vector<std::vector<float>> random_contributions(int n, int len, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<std::vector<float>> c(n, std::vector<float>(len));
  for (auto& v : c)
    for (auto& x : v) x = d(gen) * std::pow(10.0f, static_cast<float>(static_cast<int>(gen() % 7) - 3));
  return c;
}

// Sum the contributions split into `groups` partial sums (as ranks would), in a given order.
std::vector<float> grouped_exact_sum(const std::vector<std::vector<float>>& c, int groups, bool reverse) {
  const size_t len = c[0].size();
  float m = 0;
  for (auto& v : c) m = std::max(m, ft::max_abs(v));
  const int e = ft::exact_sum_exponent(m, static_cast<std::int64_t>(c.size()));
  std::vector<std::vector<std::int64_t>> partial(groups, std::vector<std::int64_t>(len, 0));
  for (size_t j = 0; j < c.size(); ++j) {
    const size_t idx = reverse ? c.size() - 1 - j : j;
    ft::accumulate_fixed(c[idx], e, partial[idx % groups]);
  }
  std::vector<std::int64_t> total(len, 0);
  for (int g = groups - 1; g >= 0; --g)
    for (size_t i = 0; i < len; ++i) total[i] += partial[g][i];
  std::vector<float> out(len);
  ft::fixed_to_float(total, e, out);
  return out;
}

TEST(ExactSum, SameBitsForAnyGroupingAndOrder) {
  const auto c = random_contributions(24, 1000, 1);
  const auto ref = grouped_exact_sum(c, 1, false);
  for (int groups : {2, 3, 4, 7, 24})
    for (bool rev : {false, true}) {
      const auto got = grouped_exact_sum(c, groups, rev);
      ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float))) << groups << " groups";
    }
  // Plain float summation is *not* order independent on the same data (why this exists).
  std::vector<float> fwd(1000, 0.0f), bwd(1000, 0.0f);
  for (size_t j = 0; j < c.size(); ++j)
    for (size_t i = 0; i < 1000; ++i) {
      fwd[i] += c[j][i];
      bwd[i] += c[c.size() - 1 - j][i];
    }
  EXPECT_NE(0, std::memcmp(fwd.data(), bwd.data(), fwd.size() * sizeof(float)));
}

TEST(ExactSum, AccurateRelativeToTheLargestValue) {
  const auto c = random_contributions(16, 500, 2);
  const auto got = grouped_exact_sum(c, 4, false);
  float m = 0;
  for (auto& v : c) m = std::max(m, ft::max_abs(v));
  for (size_t i = 0; i < 500; ++i) {
    double exact = 0;
    for (auto& v : c) exact += v[i];
    // One float rounding of the result plus the quantum (16 * m * 2^-62 ~ 0) per contribution.
    EXPECT_NEAR(got[i], exact, std::fabs(exact) * 6e-8 + 16 * m * 1e-18) << i;
  }
}

TEST(ExactSum, NoOverflowAtTheBound) {
  // 1000 contributions all at the maximum: the int64 partial sums reach ~2^62 and must not wrap.
  const int n = 1000;
  std::vector<std::vector<float>> c(n, std::vector<float>(2, 1.0e30f));
  c[0][1] = -1.0e30f;
  const auto got = grouped_exact_sum(c, 5, false);
  EXPECT_NEAR(got[0], 1.0e33, 1.0e33 * 1e-6);
  EXPECT_NEAR(got[1], 998.0e30, 998.0e30 * 1e-6);
}

// A non-finite or oversized gradient is an error the job met (exit status 4), neither the
// caller's input (InvalidArgument, 2) nor a bug in ftcc (InternalError, 1).
template <class F>
void expect_job_error(F f) {
  try {
    f();
    ADD_FAILURE() << "no throw";
  } catch (const ftcc::InvalidArgument& e) {
    ADD_FAILURE() << "InvalidArgument (exit status 2, configuration error): " << e.what();
  } catch (const ftcc::InternalError& e) {
    ADD_FAILURE() << "InternalError (exit status 1): " << e.what();
  } catch (const ftcc::Error&) {
  }
}

TEST(ExactSum, ZerosAndNonFinite) {
  EXPECT_EQ(ft::exact_sum_exponent(0.0f, 10), 0);
  expect_job_error([&] { (void)ft::exact_sum_exponent(std::nanf(""), 10); });
  expect_job_error([&] { (void)ft::exact_sum_exponent(INFINITY, 10); });
}

// A NaN anywhere in a contribution must reach the guard: std::max(m, NaN) keeps m, so a max_abs
// built on it let a NaN gradient through, and llrint(NaN * 2^e) summed INT64_MIN into the bucket.
TEST(ExactSum, NanOrInfAnywhereMakesMaxAbsInfinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, -nan, inf, -inf})
    for (std::size_t at : {0u, 1u, 3u}) {
      std::vector<float> v = {0.5f, -2.0f, 1.0f, 0.25f};
      v[at] = bad;
      EXPECT_EQ(ft::max_abs(v), inf) << bad << " at " << at;
    }
  EXPECT_EQ(ft::max_abs(std::vector<float>{0.5f, -2.0f}), 2.0f);
  // What the reducer does with the per-rank maxima (an allreduce-MAX is std::max in either
  // order): a rank with a NaN makes the bucket's maximum infinite for every rank, and the
  // exponent refuses it.
  const float with_nan = ft::max_abs(std::vector<float>{1.0f, nan}), finite = ft::max_abs(std::vector<float>{3.0f});
  EXPECT_EQ(std::max(with_nan, finite), inf);
  EXPECT_EQ(std::max(finite, with_nan), inf);
  expect_job_error([&] { (void)ft::exact_sum_exponent(std::max(finite, with_nan), 4); });
}

TEST(ExactSum, AccumulateRefusesValuesThatDoNotFitInsteadOfInt64Min) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int e = ft::exact_sum_exponent(2.0f, 4);
  std::vector<std::int64_t> acc(3, 0);
  expect_job_error([&] { ft::accumulate_fixed(std::vector<float>{1.0f, nan, 0.5f}, e, acc); });
  expect_job_error([&] { ft::accumulate_fixed(std::vector<float>{1.0f, std::numeric_limits<float>::infinity(), 0.5f}, e, acc); });
  // A value far beyond the bucket's maximum (e not from its bucket) would overflow int64.
  expect_job_error([&] { ft::accumulate_fixed(std::vector<float>{1.0f, 1.0e10f, 0.5f}, e, acc); });
  for (auto a : acc) EXPECT_NE(a, std::numeric_limits<std::int64_t>::min());
  // In range: accepted, and exact.
  std::fill(acc.begin(), acc.end(), 0);
  ft::accumulate_fixed(std::vector<float>{2.0f, -2.0f, 0.5f}, e, acc);
  std::vector<float> back(3);
  ft::fixed_to_float(acc, e, back);
  EXPECT_EQ(back, (std::vector<float>{2.0f, -2.0f, 0.5f}));
}

// The trainers' verdict on a step (train/run_common.hpp: require_finite): the message names the value and the step.
TEST(RequireFinite, NamesTheLossOrTheGradientAndTheStep) {
  ftcc::train::TrainConfig cfg;
  cfg.lr = 1e6;
  EXPECT_NO_THROW(ft::require_finite(0.5, true, 3, cfg));
  auto message = [&](double loss, bool grads_finite) {
    try {
      ft::require_finite(loss, grads_finite, 12, cfg);
    } catch (const ftcc::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no throw)");
  };
  EXPECT_EQ(message(std::nan(""), true),
            "non-finite loss (nan) at step 12: the training diverged (lower --lr, now 1e+06) or the data holds "
            "NaN/Inf values");
  EXPECT_EQ(message(-INFINITY, true).substr(0, 36), "non-finite loss (-inf) at step 12: t");
  EXPECT_EQ(message(2.5, false).substr(0, 46), "non-finite gradient (loss 2.5) at step 12: the");
  EXPECT_EQ(message(INFINITY, false).substr(0, 33), "non-finite loss (inf) at step 12:");
}

}  // namespace
