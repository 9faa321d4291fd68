// tensor/random.hpp: Philox4x32-10, a counter-based random number generator (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11), and the distributions ftcc needs.
//
// Why our own: std::uniform_real_distribution and friends differ between standard libraries, so
// the same seed would give different initial weights on different platforms. Philox is a pure
// function (key, counter) -> 4 x 32 random bits, so element i of a stream can be computed on any
// rank and any device without state, and two streams with different keys never overlap.
// Floats are made from the top 24 bits (uniform on [0,1) with spacing 2^-24); normals by
// Box-Muller from two uniforms, with the cos/sin in double so that results are reproducible to the
// last bit across libm implementations for the sizes we use (they agree on correctly rounded
// double cos/sin of float-derived arguments in practice; tests pin a few values).
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace ftcc::tensor {

class Philox {
 public:
  // seed: the user's seed; stream: which independent sequence (e.g. parameter index).
  explicit Philox(std::uint64_t seed, std::uint64_t stream = 0) : key_{static_cast<std::uint32_t>(seed),
                                                                       static_cast<std::uint32_t>(seed >> 32)},
                                                                  stream_(stream) {}

  // The 4 words of block `counter` (pure: no state changes).
  std::array<std::uint32_t, 4> block(std::uint64_t counter) const;

  // Element i of the stream as 32 random bits, and as a float/double in [0, 1).
  std::uint32_t bits(std::uint64_t i) const { return block(i / 4)[i % 4]; }
  float uniform(std::uint64_t i) const { return static_cast<float>(bits(i) >> 8) * 0x1.0p-24f; }
  double uniform_f64(std::uint64_t i) const;
  // {uniform_f64(2i), uniform_f64(2i + 1)}: the two doubles of block i, computed from it once.
  std::array<double, 2> uniform_f64_pair(std::uint64_t i) const;
  // Uniform integer in [0, bound) without modulo bias (Lemire's multiply-shift with rejection);
  // consumes elements i, i+1, ... and returns in *next the first unused element.
  std::uint64_t below(std::uint64_t bound, std::uint64_t i, std::uint64_t* next) const;

  // Fill helpers: element k of `out` comes from stream position k, so a buffer can be filled in
  // pieces (or on another device) with identical results. Each block is computed once (4 floats, or
  // the 2 uniforms of one normal), giving the same values as the element-wise functions above.
  void fill_uniform(std::span<float> out, float lo, float hi) const;
  void fill_normal(std::span<float> out, float mean, float stddev) const;

  // Standard normals for bulk data (synthetic data sets; not initial weights): out[k] is normal
  // number first + k of the stream. Block b gives normals 4b .. 4b+3 by Box-Muller on two pairs of
  // 24-bit float uniforms, keeping both the cos and the sin, with Eigen's vectorised float log, sin
  // and cos: about 10x the speed of fill_normal. Values depend on the position alone (any split
  // of a buffer gives the same bits); the last bit may differ between builds that differ in FMA
  // (native vs portable), and |value| <= 5.9 (the smallest uniform is 2^-24).
  void fill_standard_normal_fast(std::uint64_t first, std::span<float> out) const;

 private:
  std::array<std::uint32_t, 2> key_;
  std::uint64_t stream_;
};

// A 64-bit mix (splitmix64 finaliser) for deriving child seeds: seed_for(seed, "layer 3").
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t salt);

}  // namespace ftcc::tensor
