#include "ftcc/train/exact_sum.hpp"

#include <cmath>
#include <limits>

#include "ftcc/base/error.hpp"

namespace ftcc::train {

int fixed_point_exponent(double bound) {
  FTCC_CHECK_T(::ftcc::Error, std::isfinite(bound)) << "a fixed-point sum bounded by " << bound
                                                    << " is not finite: lower the learning rate or check the data";
  if (bound == 0.0) return 0;
  int k = 0;
  std::frexp(bound, &k);  // bound = f * 2^k with f in [0.5, 1): bound < 2^k, so bound * 2^(62-k) < 2^62
  return 62 - k;
}

int exact_sum_exponent(float max_abs_value, std::int64_t n_total) {
  FTCC_INVARIANT(n_total > 0) << "exact sum over no contributions";
  FTCC_CHECK_T(::ftcc::Error, std::isfinite(max_abs_value)) << "gradient is not finite (max |g| = " << max_abs_value
                                           << "): lower the learning rate or check the data";
  return fixed_point_exponent(static_cast<double>(max_abs_value) * static_cast<double>(n_total));
}

// Scaling by 2^e is a multiplication by a power of two: exact here (no overflow: |x| < 2^63 is
// checked; no underflow: |e| stays far below double's exponent range for float inputs), so it
// gives ldexp's bits without its library call per element.
void accumulate_fixed(std::span<const float> values, int e, std::span<std::int64_t> acc) {
  FTCC_INVARIANT_EQ(values.size(), acc.size()) << "accumulate_fixed";
  const double scale = std::ldexp(1.0, e);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double x = static_cast<double>(values[i]) * scale;
    // llrint of NaN or of a value beyond int64 is unspecified (INT64_MIN on x86): refuse instead.
    FTCC_CHECK_T(::ftcc::Error, std::fabs(x) < 0x1p63) << "accumulate_fixed: value " << values[i] << " at index " << i
                                      << " does not fit 64-bit fixed point at scale 2^" << e;
    acc[i] += round_to_int64(x);
  }
}

void fixed_to_float(std::span<const std::int64_t> acc, int e, std::span<float> out) {
  FTCC_INVARIANT_EQ(acc.size(), out.size()) << "fixed_to_float";
  const double scale = std::ldexp(1.0, -e);
  for (std::size_t i = 0; i < acc.size(); ++i) out[i] = static_cast<float>(static_cast<double>(acc[i]) * scale);
}

float max_abs(std::span<const float> values) {
  float m = 0.0f;
  for (float v : values) {
    if (!std::isfinite(v)) return std::numeric_limits<float>::infinity();
    m = std::max(m, std::fabs(v));
  }
  return m;
}

}  // namespace ftcc::train
