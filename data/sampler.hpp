// data/sampler.hpp: exactly-once data order for data-parallel training, including after the
// world shrinks mid-epoch.
//
// Rules (docs/training.md, "What it guarantees"):
//  * An epoch is a permutation of the sample ids 0..N-1 that depends only on (seed, epoch):
//    Fisher-Yates driven by Philox keyed with mix_seed(seed, epoch).
//  * Global batch k of an epoch is positions [k B, min((k+1) B, N)) of that permutation. The last
//    batch is partial unless drop_last (then the tail samples are not used that epoch).
//  * Batch k is cut into micro-batches of `micro_batch` positions (the last may be short); rank r of
//    n takes the whole micro-batches [floor(r M / n), floor((r+1) M / n)) of the M micro-batches,
//    i.e. a contiguous range of positions. The split depends only on (k, n), so the union over the
//    ranks is exactly batch k, the parts are disjoint, and the same micro-batches (hence the same
//    per-micro-batch gradients) exist whatever n is.
//  * The training position is a Cursor (epoch, step). After a failure, survivors agree on the
//    cursor of the first batch not committed and recompute it with the new world size: nothing
//    is skipped, nothing is seen twice. A rank may get zero micro-batches when n > M.
//  * Exactly-once is checked, not assumed: a trainer adds every sample it feeds to the model in a
//    committed step to a SampleTally (a count and an order-independent digest), sums the tallies
//    over the ranks, and compares the total at the end with expected_tally(cursor), which is
//    computed from the epochs' permutations directly (not through batch() / rank_ids()). A sample
//    skipped, repeated or taken from the wrong epoch changes the digest.
// Thread safety: const methods may be called concurrently except that permutation() caches the
// last epoch's order (guarded by a mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ftcc::data {

// The permutation of 0..n-1 for (seed, epoch); identical on every platform.
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

struct Cursor {
  std::int64_t epoch = 0;
  std::int64_t step = 0;  // the next global batch to train on
  bool operator==(const Cursor&) const = default;
};

// splitmix64 (Steele, Lea, Flood 2014) of (epoch, sample id): what a consumed sample adds to a
// SampleTally's digest. Pseudo-random 64-bit values, so a skipped sample and a repeated one
// (or two samples swapped between epochs) cancel with probability about 2^-64.
std::uint64_t sample_mix(std::int64_t epoch, std::int64_t id);

// What a run consumed: the number of samples and the wrapping sum of their sample_mix. Sums are
// order independent, so per-rank, per-step tallies add up to the run's whatever the split.
struct SampleTally {
  std::int64_t count = 0;
  std::uint64_t digest = 0;

  void add(std::int64_t epoch, std::span<const std::int64_t> ids);
  SampleTally& operator+=(const SampleTally& other);
  bool operator==(const SampleTally&) const = default;

  // As doubles, to travel in a step's existing float64 SUM allreduce: the count and the digest's
  // four 16-bit limbs. A limb sum over n ranks stays below 2^16 n, exact in a double for any rank
  // count below 2^37, and the wrapping digest sum is rebuilt from the summed limbs.
  static constexpr std::size_t kDoubles = 5;
  void to_doubles(double* out) const;
  static SampleTally from_doubles(const double* in);
};

// A digest as 16 lowercase hex digits (how summaries and checkpoints write it), and back (throws
// ftcc::InvalidArgument on anything else).
std::string digest_hex(std::uint64_t digest);
std::uint64_t parse_digest_hex(const std::string& text);

struct SamplerOptions {
  std::int64_t num_samples = 0;
  std::int64_t global_batch = 1;
  std::uint64_t seed = 0;
  std::int64_t micro_batch = 1;  // split granularity; 1 = per sample
  bool drop_last = false;
};

// A range of positions [begin, end) inside a global batch.
struct Range {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

class DistributedSampler {
 public:
  explicit DistributedSampler(SamplerOptions options);
  // Copies and moves carry the options only (the permutation cache is rebuilt on demand), so a
  // trainer can hold a sampler by value.
  DistributedSampler(const DistributedSampler& other) : DistributedSampler(other.options_) {}
  DistributedSampler& operator=(const DistributedSampler& other);

  std::int64_t steps_per_epoch() const;
  std::int64_t batch_size(std::int64_t step) const;  // B, or the short last batch
  std::int64_t micro_batches(std::int64_t step) const;
  // The cursor after `c` (wraps to step 0 of the next epoch).
  Cursor next(Cursor c) const;

  // All sample ids of global batch c.step of epoch c.epoch, in order.
  std::vector<std::int64_t> batch(Cursor c) const;
  // Positions of rank `rank` of `world` inside that batch, and its sample ids.
  Range rank_range(std::int64_t step, int world, int rank) const;
  std::vector<std::int64_t> rank_ids(Cursor c, int world, int rank) const;

  // The tally of a run that consumed every global batch before cursor c exactly once: each
  // completed epoch's samples (every id 0..N-1, or with drop_last the permutation's first
  // steps_per_epoch() x B) plus the first c.step x B positions of epoch c.epoch's permutation.
  // Computed from epoch_permutation() alone, independently of the split.
  SampleTally expected_tally(Cursor c) const;

  const SamplerOptions& options() const { return options_; }

 private:
  const std::vector<std::int64_t>& permutation(std::int64_t epoch) const;
  SamplerOptions options_;
  mutable std::mutex mu_;
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::int64_t> cached_;
};

}  // namespace ftcc::data
