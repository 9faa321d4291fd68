// tests/train/tp_exact_pair_test.cpp: tp --deterministic's pair (train/tp_exact_pair.hpp) gives
// each shard exactly the whole pair's bits for its slice, for shard counts 1-5 and slices of odd
// widths (the vector loops' tails land elsewhere in each), and its exact sums over the hidden
// features add up to the same integers however the features are cut. Without MPI: the
// communicator steps (an allreduce of maxima and of int64 sums) are done here by hand.
#include "ftcc/train/tp_exact_pair.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ftcc/base/error.hpp"
#include "ftcc/train/exact_sum.hpp"
#include "ftcc/train/tp_shard.hpp"

using namespace ftcc;
using namespace ftcc::train;

namespace {

using i64 = std::int64_t;

std::vector<float> random_values(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

tensor::Tensor param(const tensor::Shape& s, std::vector<float> v) {
  auto t = tensor::Tensor::from_vector(s, v);
  t.requires_grad_(true);
  return t;
}

// Rows [b, e) of a row-major [rows, cols] matrix, and columns [b, e).
std::vector<float> rows_of(const std::vector<float>& m, i64 cols, i64 b, i64 e) {
  return {m.begin() + b * cols, m.begin() + e * cols};
}
std::vector<float> cols_of(const std::vector<float>& m, i64 rows, i64 cols, i64 b, i64 e) {
  std::vector<float> out;
  for (i64 r = 0; r < rows; ++r) out.insert(out.end(), m.begin() + r * cols + b, m.begin() + r * cols + e);
  return out;
}

}  // namespace

TEST(TpExactPair, ShardsSumToTheSameIntegers) {
  const i64 R = 7, K = 53, N = 9;
  const auto A = random_values(R * K, 1), B = random_values(K * N, 2, 0.01f);
  const int e = exact_product_exponent(max_abs(A), max_abs(B), K);
  std::vector<i64> whole(R * N, 0);
  accumulate_fixed_products(A, B, R, K, N, e, whole);
  for (int n = 1; n <= 5; ++n) {
    std::vector<i64> sum(R * N, 0);
    for (int r = 0; r < n; ++r) {  // each shard's partial, then the "allreduce" of the integers
      const auto s = shard_range(K, n, r);
      std::vector<i64> part(R * N, 0);
      accumulate_fixed_products(cols_of(A, R, K, s.begin, s.end), rows_of(B, N, s.begin, s.end), R, s.end - s.begin, N,
                                e, part);
      for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += part[j];
    }
    EXPECT_EQ(sum, whole) << n << " shards";
  }
  // And the sum is the product: within float rounding of a double reference.
  std::vector<float> out(R * N);
  fixed_to_float(whole, e, out);
  for (i64 i = 0; i < R; ++i)
    for (i64 c = 0; c < N; ++c) {
      double ref = 0;
      for (i64 k = 0; k < K; ++k) ref += static_cast<double>(A[i * K + k]) * B[k * N + c];
      EXPECT_NEAR(out[i * N + c], ref, 1e-6 * (1 + std::fabs(ref))) << i << "," << c;
    }
}

TEST(TpExactPair, ExponentRefusesWhatIsNotFinite) {
  EXPECT_EQ(exact_product_exponent(0.0f, 5.0f, 10), 0);
  // 3 terms of at most 2 * 4: bound 24 < 2^5, so e = 57 and 24 * 2^57 < 2^62.
  EXPECT_EQ(exact_product_exponent(2.0f, 4.0f, 3), 57);
  EXPECT_THROW(exact_product_exponent(INFINITY, 1.0f, 3), ftcc::Error);
  EXPECT_THROW(exact_product_exponent(1.0f, NAN, 3), ftcc::Error);
}

TEST(TpExactPair, EachShardHasTheWholePairsBits) {
  const i64 B = 13, in = 19, H = 37, O = 11;
  const auto x = random_values(B * in, 3), Wc = random_values(H * in, 4, 0.3f), bc = random_values(H, 5, 0.1f),
             Wr = random_values(O * H, 6, 0.2f), dz = random_values(B * O, 7, 0.05f);
  const auto X = tensor::Tensor::from_vector({B, in}, x), DZ = tensor::Tensor::from_vector({B, O}, dz);
  for (auto act : {nn::Activation::ReLU, nn::Activation::Tanh, nn::Activation::Sigmoid}) {
    auto wc = param({H, in}, Wc), b = param({H}, bc), wr = param({O, H}, Wr);
    ExactTpPair whole(act, H);
    whole.hidden(X, wc, b);
    whole.slice_gradients(X, wc, b, wr, DZ);
    const auto gWc = wc.grad().to_vector(), gbc = b.grad().to_vector(), gWr = wr.grad().to_vector();
    for (int n = 2; n <= 5; ++n)
      for (int r = 0; r < n; ++r) {
        const auto s = shard_range(H, n, r);
        const i64 h = s.end - s.begin;
        auto swc = param({h, in}, rows_of(Wc, in, s.begin, s.end)), sb = param({h}, rows_of(bc, 1, s.begin, s.end)),
             swr = param({O, h}, cols_of(Wr, O, H, s.begin, s.end));
        ExactTpPair part(act, H);
        part.hidden(X, swc, sb);
        part.slice_gradients(X, swc, sb, swr, DZ);
        const std::string where = "activation " + std::to_string(static_cast<int>(act)) + ", shard " +
                                  std::to_string(r) + " of " + std::to_string(n);
        EXPECT_EQ(part.activations(), cols_of(whole.activations(), B, H, s.begin, s.end)) << where;
        EXPECT_EQ(part.pre_gradient(), cols_of(whole.pre_gradient(), B, H, s.begin, s.end)) << where;
        EXPECT_EQ(swc.grad().to_vector(), rows_of(gWc, in, s.begin, s.end)) << where;
        EXPECT_EQ(sb.grad().to_vector(), rows_of(gbc, 1, s.begin, s.end)) << where;
        EXPECT_EQ(swr.grad().to_vector(), cols_of(gWr, O, H, s.begin, s.end)) << where;
      }
    // The whole pair against the plain formulas (double): its sums are sums, in some order.
    for (i64 i = 0; i < B; ++i)
      for (i64 k = 0; k < H; ++k) {
        double pre = bc[k];
        for (i64 m = 0; m < in; ++m) pre += static_cast<double>(x[i * in + m]) * Wc[k * in + m];
        const double a = act == nn::Activation::ReLU ? std::max(pre, 0.0)
                         : act == nn::Activation::Tanh ? std::tanh(pre) : 1 / (1 + std::exp(-pre));
        EXPECT_NEAR(whole.activations()[i * H + k], a, 1e-5) << i << "," << k;
      }
  }
}
