#include "ftcc/tensor/random.hpp"

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "ftcc/base/error.hpp"

namespace ftcc::tensor {

namespace {
constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // Philox4x32 multipliers
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
}  // namespace

std::array<std::uint32_t, 4> Philox::block(std::uint64_t counter) const {
  std::array<std::uint32_t, 4> c{static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
                                 static_cast<std::uint32_t>(stream_), static_cast<std::uint32_t>(stream_ >> 32)};
  std::uint32_t k0 = key_[0], k1 = key_[1];
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

namespace {
double to_f64(std::uint64_t hi, std::uint64_t lo) { return static_cast<double>(((hi << 32) | lo) >> 11) * 0x1.0p-53; }
}  // namespace

double Philox::uniform_f64(std::uint64_t i) const { return to_f64(bits(2 * i), bits(2 * i + 1)); }

std::array<double, 2> Philox::uniform_f64_pair(std::uint64_t i) const {
  const auto b = block(i);  // bits 4i .. 4i+3: uniform_f64(2i) takes the first two, 2i+1 the others
  return {to_f64(b[0], b[1]), to_f64(b[2], b[3])};
}

// The 64 x 64 -> 128-bit product of the multiply-shift; __extension__ marks the GCC/Clang type as
// intended under -Wpedantic.
__extension__ typedef unsigned __int128 u128;

std::uint64_t Philox::below(std::uint64_t bound, std::uint64_t i, std::uint64_t* next) const {
  FTCC_CHECK(bound > 0) << "Philox::below(0)";
  // 64 random bits per draw; the rejection threshold removes the bias of the multiply-shift.
  std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    std::uint64_t x = (static_cast<std::uint64_t>(bits(2 * i)) << 32) | bits(2 * i + 1);
    ++i;
    u128 m = static_cast<u128>(x) * bound;
    if (static_cast<std::uint64_t>(m) >= threshold) {
      if (next) *next = i;
      return static_cast<std::uint64_t>(m >> 64);
    }
  }
}

void Philox::fill_uniform(std::span<float> out, float lo, float hi) const {
  for (std::size_t k = 0; k < out.size(); k += 4) {
    const auto b = block(k / 4);
    for (std::size_t j = 0; j < 4 && k + j < out.size(); ++j)
      out[k + j] = lo + (hi - lo) * (static_cast<float>(b[j] >> 8) * 0x1.0p-24f);  // uniform(k + j)
  }
}

void Philox::fill_normal(std::span<float> out, float mean, float stddev) const {
  for (std::size_t k = 0; k < out.size(); ++k) {
    // 1 - u keeps the log argument in (0, 1].
    const auto [a, u2] = uniform_f64_pair(k);
    const double u1 = 1.0 - a;
    double r = std::sqrt(-2.0 * std::log(u1));
    out[k] = static_cast<float>(mean + stddev * r * std::cos(2.0 * M_PI * u2));
  }
}

void Philox::fill_standard_normal_fast(std::uint64_t first, std::span<float> out) const {
  // Chunks of kBlocks blocks. Philox runs over the chunk's counters in structure-of-arrays form
  // (so the compiler vectorises its multiplies); then r = sqrt(-2 log u1) and theta = 2 pi u2
  // for the 2 * kBlocks pairs at once, and pair p gives the normals r cos theta, r sin theta.
  // The transforms run over the used lanes rounded up to 16 (a whole number of packets at every
  // ISA level, so no lane takes Eigen's scalar tail: a value never depends on where a call began).
  constexpr std::size_t kBlocks = 256;
  alignas(64) std::uint32_t w[4][kBlocks];
  Eigen::ArrayXf u1 = Eigen::ArrayXf::Ones(2 * kBlocks), u2 = Eigen::ArrayXf::Zero(2 * kBlocks);
  Eigen::ArrayXf r(2 * kBlocks), t(2 * kBlocks), c(2 * kBlocks), s(2 * kBlocks);
  const std::uint64_t end = first + out.size();
  for (std::uint64_t b0 = first / 4; b0 * 4 < end; b0 += kBlocks) {
    const std::size_t nb = static_cast<std::size_t>(std::min<std::uint64_t>(kBlocks, (end + 3) / 4 - b0));
    for (std::size_t i = 0; i < nb; ++i) {
      const std::uint64_t counter = b0 + i;
      w[0][i] = static_cast<std::uint32_t>(counter);
      w[1][i] = static_cast<std::uint32_t>(counter >> 32);
      w[2][i] = static_cast<std::uint32_t>(stream_);
      w[3][i] = static_cast<std::uint32_t>(stream_ >> 32);
    }
    std::uint32_t k0 = key_[0], k1 = key_[1];
    for (int round = 0; round < 10; ++round) {  // block()'s rounds, one lane per counter
      for (std::size_t i = 0; i < nb; ++i) {
        const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * w[0][i];
        const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * w[2][i];
        const std::uint32_t c1 = w[1][i], c3 = w[3][i];
        w[0][i] = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
        w[1][i] = static_cast<std::uint32_t>(p1);
        w[2][i] = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
        w[3][i] = static_cast<std::uint32_t>(p0);
      }
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    // Pair 2i from words 0, 1 of block i; pair 2i + 1 from words 2, 3. u1 in (0, 1] keeps the log finite.
    for (std::size_t i = 0; i < nb; ++i) {
      u1[static_cast<Eigen::Index>(2 * i)] = static_cast<float>((w[0][i] >> 8) + 1) * 0x1.0p-24f;
      u2[static_cast<Eigen::Index>(2 * i)] = static_cast<float>(w[1][i] >> 8) * 0x1.0p-24f;
      u1[static_cast<Eigen::Index>(2 * i + 1)] = static_cast<float>((w[2][i] >> 8) + 1) * 0x1.0p-24f;
      u2[static_cast<Eigen::Index>(2 * i + 1)] = static_cast<float>(w[3][i] >> 8) * 0x1.0p-24f;
    }
    const Eigen::Index lanes = static_cast<Eigen::Index>((2 * nb + 15) / 16 * 16);
    r.head(lanes) = (-2.0f * u1.head(lanes).log()).sqrt();
    t.head(lanes) = 6.28318530717958647692f * u2.head(lanes);
    c.head(lanes) = r.head(lanes) * t.head(lanes).cos();
    s.head(lanes) = r.head(lanes) * t.head(lanes).sin();
    // Normal 4b + 2p' + h (p' pair within the block, h = 0 cos, 1 sin) for positions in [first, end).
    const std::uint64_t lo = std::max(first, b0 * 4), hi = std::min(end, (b0 + nb) * 4);
    for (std::uint64_t j = lo; j < hi; ++j) {
      const auto pair = static_cast<Eigen::Index>((j - b0 * 4) / 2);
      out[j - first] = (j & 1) == 0 ? c[pair] : s[pair];
    }
  }
}

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t salt) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace ftcc::tensor
