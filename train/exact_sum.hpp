// train/exact_sum.hpp: an order-independent, bitwise-reproducible sum of float gradients.
//
// Float addition is not associative, so a ring allreduce's result depends on the rank count.
// For --deterministic, every gradient contribution (one per fixed-size micro-batch, the same
// set whatever the rank count) is turned into 64-bit fixed point at one scale 2^e shared by all
// ranks, the integers are summed (associative: any order, any rank count, same bits), and the
// sum is turned back into float once.
//
// The scale comes from an allreduce-MAX of |g| (exact, order independent) over every
// contribution of the bucket: e is the largest exponent with  n_total * max|g| * 2^e < 2^62,
// so no partial sum can overflow. Precision: each value is rounded to a quantum of
// 2^-e ~ n_total * max|g| * 2^-62, i.e. about 2e-19 * n_total of the bucket's largest gradient,
// far below float32's own rounding (6e-8 relative) for every element within ~2^30 of the max;
// elements smaller than the quantum are flushed to zero (the documented cost).
//
// Non-finite values: max_abs() returns +infinity when any value is NaN or infinite (std::max would
// drop a NaN, depending on the order), so the allreduce-MAX of the bucket maxima is +infinity on
// every rank as soon as one contribution anywhere is not finite: every rank sees it at the same
// step (GradientReducer::exact_sum then reports it). exact_sum_exponent() refuses such a maximum
// and accumulate_fixed() refuses a value that does not fit 64-bit fixed point, instead of turning
// it into INT64_MIN.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ftcc::train {

// Exponent e for a bucket whose largest |value| over all contributions is max_abs, summed over
// n_total contributions. Returns 0 when max_abs == 0; throws when max_abs is not finite.
int exact_sum_exponent(float max_abs, std::int64_t n_total);

// The largest e with bound * 2^e < 2^62 (bound: the largest possible |sum|); 0 when bound == 0.
// Throws ftcc::Error when bound is not finite.
int fixed_point_exponent(double bound);

// round half to even of x to int64 (|x| < 2^63): llrint in the default FP mode, without its
// library call on x86-64 (cvtsd2si rounds by MXCSR, whose default is the same mode). Inline: it
// runs once per element of the fixed-point loops.
inline std::int64_t round_to_int64(double x) {
#if defined(__x86_64__)
  return _mm_cvtsd_si64(_mm_set_sd(x));
#else
  return std::llrint(x);
#endif
}

// acc[i] += round(values[i] * 2^e)   (round half to even: llrint in the default FP mode); throws
// when a scaled value is not finite or not below 2^63 in magnitude (e was not from its bucket).
void accumulate_fixed(std::span<const float> values, int e, std::span<std::int64_t> acc);

// out[i] = float(acc[i] * 2^-e)
void fixed_to_float(std::span<const std::int64_t> acc, int e, std::span<float> out);

// max |values[i]|, or +infinity when a value is NaN or infinite.
float max_abs(std::span<const float> values);

}  // namespace ftcc::train
