#include "ftcc/train/tp_exact_pair.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/train/exact_sum.hpp"

namespace ftcc::train {
namespace {

namespace fc = ftcc::comm;
using i64 = std::int64_t;

// The activation and its derivative (from the activation's value), one element at a time: the
// same bits wherever the element sits in a slice (Eigen's packet and scalar paths differ).
float activate_one(nn::Activation act, float v) {
  switch (act) {
    case nn::Activation::ReLU: return v > 0.0f ? v : 0.0f;
    case nn::Activation::Tanh: return std::tanh(v);
    case nn::Activation::Sigmoid: return 1.0f / (1.0f + std::exp(-v));
  }
  return v;
}
float derivative_one(nn::Activation act, float a, float g) {
  switch (act) {
    case nn::Activation::ReLU: return a > 0.0f ? g : 0.0f;
    case nn::Activation::Tanh: return g * (1.0f - a * a);
    case nn::Activation::Sigmoid: return g * a * (1.0f - a);
  }
  return g;
}

void require_cpu_f32(const tensor::Tensor& t, const char* what) {
  FTCC_INVARIANT(t.device() == tensor::Device::CPU && t.dtype() == tensor::DType::f32)
      << "tp --deterministic: " << what << " is not a float32 CPU tensor";
}

// out [R, N] = sum over the ranks of c of A [R, K] x Bk [K, N], exactly (see the header); NaN
// everywhere when a maximum is not finite (every rank decides from the same allreduced maxima).
tensor::Tensor exact_product(fc::Communicator& c, std::span<const float> A, std::span<const float> Bk, i64 R, i64 K,
                             i64 N, i64 k_total, Pins& pins) {
  auto& maxes = *pins.keep(std::make_shared<std::vector<float>>(std::vector<float>{max_abs(A), max_abs(Bk)}));
  fc::allreduce(c, fc::kInPlace, maxes.data(), maxes.size(), fc::DType::f32, fc::ReduceOp::max);
  tensor::Tensor out = tensor::Tensor::empty({R, N});
  const std::span<float> o(out.data(), static_cast<std::size_t>(R * N));
  if (!std::isfinite(maxes[0]) || !std::isfinite(maxes[1])) {
    std::fill(o.begin(), o.end(), std::numeric_limits<float>::quiet_NaN());
    return out;
  }
  const int e = exact_product_exponent(maxes[0], maxes[1], k_total);
  auto& acc = *pins.keep(std::make_shared<std::vector<i64>>(static_cast<std::size_t>(R * N), 0));
  accumulate_fixed_products(A, Bk, R, K, N, e, acc);
  fc::allreduce(c, fc::kInPlace, acc.data(), acc.size(), fc::DType::i64, fc::ReduceOp::sum);
  fixed_to_float(acc, e, o);
  return out;
}

}  // namespace

int exact_product_exponent(float max_a, float max_b, i64 n_terms) {
  FTCC_INVARIANT(n_terms > 0) << "exact product sum over no terms";
  return fixed_point_exponent(static_cast<double>(max_a) * static_cast<double>(max_b) * static_cast<double>(n_terms));
}

void accumulate_fixed_products(std::span<const float> A, std::span<const float> Bk, i64 R, i64 K, i64 N, int e,
                               std::span<i64> out) {
  FTCC_INVARIANT(static_cast<i64>(A.size()) == R * K && static_cast<i64>(Bk.size()) == K * N &&
                 static_cast<i64>(out.size()) == R * N)
      << "accumulate_fixed_products: sizes " << A.size() << ", " << Bk.size() << ", " << out.size() << " for " << R
      << " x " << K << " x " << N;
  const double scale = std::ldexp(1.0, e);  // a power of two: exact scaling, as exact_sum.cpp
  for (i64 i = 0; i < R; ++i) {
    i64* row = out.data() + i * N;
    for (i64 k = 0; k < K; ++k) {
      const double a = static_cast<double>(A[static_cast<std::size_t>(i * K + k)]) * scale;
      if (a == 0.0) continue;  // every product is 0: adds nothing
      const float* b = Bk.data() + k * N;
      for (i64 n = 0; n < N; ++n) {
        const double x = a * static_cast<double>(b[n]);  // exact: a float times a float, times 2^e
        FTCC_CHECK_T(::ftcc::Error, std::fabs(x) < 0x1p62) << "tp --deterministic: product " << x
                                                           << " does not fit the fixed-point scale 2^" << e;
        row[n] += round_to_int64(x);
      }
    }
  }
}

void ExactTpPair::hidden(const tensor::Tensor& x, const tensor::Tensor& Wc, const tensor::Tensor& bc) {
  require_cpu_f32(x, "the pair's input");
  rows_ = x.size(0);
  h_ = Wc.size(0);
  const i64 in = x.size(1);
  FTCC_INVARIANT(Wc.size(1) == in && bc.numel() == h_) << "tp --deterministic: Wc/bc do not fit x";
  // Wc^T [in, h], so the loop over the hidden features is the innermost (contiguous, vectorised
  // across features) and each pre[i, k] sums over m in order: bc + x0 w0 + x1 w1 + ...
  std::vector<float> wt(static_cast<std::size_t>(in * h_));
  const float* w = Wc.data();
  for (i64 k = 0; k < h_; ++k)
    for (i64 m = 0; m < in; ++m) wt[static_cast<std::size_t>(m * h_ + k)] = w[k * in + m];
  a_.assign(static_cast<std::size_t>(rows_ * h_), 0.0f);  // pre first, then act(pre) in place
  const float* xs = x.data();
  const float* b = bc.data();
  for (i64 i = 0; i < rows_; ++i) {
    float* p = a_.data() + i * h_;
    std::copy(b, b + h_, p);
    for (i64 m = 0; m < in; ++m) {
      const float xv = xs[i * in + m];
      const float* wr = wt.data() + m * h_;
      for (i64 k = 0; k < h_; ++k) p[k] += xv * wr[k];
    }
  }
  for (float& v : a_) v = activate_one(act_, v);
}

tensor::Tensor ExactTpPair::output(comm::Communicator& c, const tensor::Tensor& Wr, Pins& pins) {
  const i64 O = Wr.size(0);
  FTCC_INVARIANT(Wr.size(1) == h_) << "tp --deterministic: Wr has " << Wr.size(1) << " columns, the slice " << h_;
  std::vector<float> wt(static_cast<std::size_t>(h_ * O));  // Wr^T [h, O]
  const float* w = Wr.data();
  for (i64 o = 0; o < O; ++o)
    for (i64 k = 0; k < h_; ++k) wt[static_cast<std::size_t>(k * O + o)] = w[o * h_ + k];
  return exact_product(c, a_, wt, rows_, h_, O, h_total_, pins);
}

void ExactTpPair::slice_gradients(const tensor::Tensor& x, const tensor::Tensor& Wc, const tensor::Tensor& bc,
                                  const tensor::Tensor& Wr, const tensor::Tensor& dz) {
  const i64 O = Wr.size(0), in = x.size(1);
  FTCC_INVARIANT(dz.size(0) == rows_ && dz.size(1) == O) << "tp --deterministic: dz does not fit the pair";
  const float* g = dz.data();
  const float* w = Wr.data();
  // dWr[o, k] += sum over i of dz[i, o] a[i, k]   (in row order)
  float* gWr = Wr.grad().data();
  for (i64 o = 0; o < O; ++o)
    for (i64 i = 0; i < rows_; ++i) {
      const float d = g[i * O + o];
      const float* a = a_.data() + i * h_;
      float* r = gWr + o * h_;
      for (i64 k = 0; k < h_; ++k) r[k] += d * a[k];
    }
  // dpre[i, k] = act'(a) * sum over o of dz[i, o] Wr[o, k]   (in output order)
  dpre_.assign(static_cast<std::size_t>(rows_ * h_), 0.0f);
  for (i64 i = 0; i < rows_; ++i) {
    float* d = dpre_.data() + i * h_;
    for (i64 o = 0; o < O; ++o) {
      const float gv = g[i * O + o];
      const float* wr = w + o * h_;
      for (i64 k = 0; k < h_; ++k) d[k] += gv * wr[k];
    }
  }
  for (std::size_t j = 0; j < dpre_.size(); ++j) dpre_[j] = derivative_one(act_, a_[j], dpre_[j]);
  // dbc[k] += sum over i of dpre[i, k]; dWc[k, m] += sum over i of dpre[i, k] x[i, m]
  float* gbc = bc.grad().data();
  for (i64 i = 0; i < rows_; ++i)
    for (i64 k = 0; k < h_; ++k) gbc[k] += dpre_[static_cast<std::size_t>(i * h_ + k)];
  float* gWc = Wc.grad().data();
  const float* xs = x.data();
  for (i64 k = 0; k < h_; ++k)
    for (i64 i = 0; i < rows_; ++i) {
      const float d = dpre_[static_cast<std::size_t>(i * h_ + k)];
      const float* xr = xs + i * in;
      float* r = gWc + k * in;
      for (i64 m = 0; m < in; ++m) r[m] += d * xr[m];
    }
}

tensor::Tensor ExactTpPair::input_gradient(comm::Communicator& c, const tensor::Tensor& Wc, Pins& pins) {
  const i64 in = Wc.size(1);
  return exact_product(c, dpre_, std::span<const float>(Wc.data(), static_cast<std::size_t>(h_ * in)), rows_, h_, in,
                       h_total_, pins);
}

}  // namespace ftcc::train
