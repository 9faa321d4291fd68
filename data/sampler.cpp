#include "ftcc/data/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/random.hpp"

namespace ftcc::data {

std::uint64_t sample_mix(std::int64_t epoch, std::int64_t id) {
  auto splitmix64 = [](std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  return splitmix64(splitmix64(static_cast<std::uint64_t>(epoch)) ^ static_cast<std::uint64_t>(id));
}

void SampleTally::add(std::int64_t epoch, std::span<const std::int64_t> ids) {
  count += static_cast<std::int64_t>(ids.size());
  for (std::int64_t id : ids) digest += sample_mix(epoch, id);
}

SampleTally& SampleTally::operator+=(const SampleTally& other) {
  count += other.count;
  digest += other.digest;
  return *this;
}

void SampleTally::to_doubles(double* out) const {
  out[0] = static_cast<double>(count);
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<double>((digest >> (16 * i)) & 0xFFFFu);
}

SampleTally SampleTally::from_doubles(const double* in) {
  SampleTally t;
  t.count = std::llround(in[0]);
  for (int i = 0; i < 4; ++i) t.digest += static_cast<std::uint64_t>(std::llround(in[1 + i])) << (16 * i);
  return t;
}

std::string digest_hex(std::uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

std::uint64_t parse_digest_hex(const std::string& text) {
  FTCC_CHECK(text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos)
      << "not a samples digest (16 hex digits): '" << text << "'";
  return std::stoull(text, nullptr, 16);
}

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  FTCC_CHECK(n >= 0 && epoch >= 0) << "epoch_permutation(" << n << ", epoch " << epoch << ")";
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  // Fisher-Yates from the end; the stream id is a fixed tag so data order never collides with
  // weight initialisation streams of the same seed.
  tensor::Philox rng(tensor::mix_seed(seed, static_cast<std::uint64_t>(epoch)), /*stream=*/0xDA7A5A3D);
  std::uint64_t pos = 0;
  for (std::int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1), pos, &pos));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

DistributedSampler::DistributedSampler(SamplerOptions o) : options_(o) {
  FTCC_CHECK(o.num_samples > 0) << "sampler: num_samples " << o.num_samples;
  FTCC_CHECK(o.global_batch > 0) << "sampler: global_batch " << o.global_batch;
  FTCC_CHECK(o.micro_batch > 0 && o.micro_batch <= o.global_batch)
      << "sampler: micro_batch " << o.micro_batch << " with global batch " << o.global_batch;
  FTCC_CHECK(!o.drop_last || o.global_batch <= o.num_samples) << "sampler: drop_last with a batch larger than the data";
}

DistributedSampler& DistributedSampler::operator=(const DistributedSampler& other) {
  if (this != &other) {
    std::lock_guard lock(mu_);
    options_ = other.options_;
    cached_epoch_ = -1;
    cached_.clear();
  }
  return *this;
}

std::int64_t DistributedSampler::steps_per_epoch() const {
  const auto n = options_.num_samples, b = options_.global_batch;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::int64_t DistributedSampler::batch_size(std::int64_t step) const {
  FTCC_CHECK(step >= 0 && step < steps_per_epoch()) << "sampler: step " << step << " of " << steps_per_epoch();
  return std::min(options_.global_batch, options_.num_samples - step * options_.global_batch);
}

std::int64_t DistributedSampler::micro_batches(std::int64_t step) const {
  return (batch_size(step) + options_.micro_batch - 1) / options_.micro_batch;
}

Cursor DistributedSampler::next(Cursor c) const {
  return c.step + 1 < steps_per_epoch() ? Cursor{c.epoch, c.step + 1} : Cursor{c.epoch + 1, 0};
}

const std::vector<std::int64_t>& DistributedSampler::permutation(std::int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_ = epoch_permutation(options_.num_samples, options_.seed, epoch);
    cached_epoch_ = epoch;
  }
  return cached_;
}

std::vector<std::int64_t> DistributedSampler::batch(Cursor c) const {
  std::int64_t size = batch_size(c.step), start = c.step * options_.global_batch;
  std::lock_guard lock(mu_);
  const auto& p = permutation(c.epoch);
  return std::vector<std::int64_t>(p.begin() + start, p.begin() + start + size);
}

Range DistributedSampler::rank_range(std::int64_t step, int world, int rank) const {
  FTCC_CHECK(world > 0 && rank >= 0 && rank < world) << "sampler: rank " << rank << " of " << world;
  const std::int64_t m = micro_batches(step), size = batch_size(step);
  // Whole micro-batches, split as evenly as integer division allows.
  std::int64_t mb0 = rank * m / world, mb1 = (rank + 1) * m / world;
  return {std::min(size, mb0 * options_.micro_batch), std::min(size, mb1 * options_.micro_batch)};
}

std::vector<std::int64_t> DistributedSampler::rank_ids(Cursor c, int world, int rank) const {
  Range r = rank_range(c.step, world, rank);
  std::int64_t start = c.step * options_.global_batch;
  std::lock_guard lock(mu_);
  const auto& p = permutation(c.epoch);
  return std::vector<std::int64_t>(p.begin() + start + r.begin, p.begin() + start + r.end);
}

SampleTally DistributedSampler::expected_tally(Cursor c) const {
  FTCC_CHECK(c.epoch >= 0 && c.step >= 0) << "sampler: cursor (" << c.epoch << ", " << c.step << ")";
  const std::int64_t n = options_.num_samples;
  const std::int64_t per_epoch = options_.drop_last ? steps_per_epoch() * options_.global_batch : n;
  SampleTally t;
  for (std::int64_t e = 0; e <= c.epoch; ++e) {
    const std::int64_t take = e < c.epoch ? per_epoch : std::min(n, c.step * options_.global_batch);
    if (take == n) {
      // The whole epoch: every id once, whatever the permutation (so a permutation that is not
      // one would show too).
      t.count += n;
      for (std::int64_t id = 0; id < n; ++id) t.digest += sample_mix(e, id);
    } else if (take > 0) {
      const auto p = epoch_permutation(n, options_.seed, e);
      t.add(e, std::span<const std::int64_t>(p.data(), static_cast<std::size_t>(take)));
    }
  }
  return t;
}

}  // namespace ftcc::data
