#include "ftcc/train/gradient_reducer.hpp"

#include <algorithm>
#include <cmath>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/train/exact_sum.hpp"

namespace ftcc::train {

GradientReducer::GradientReducer(nn::NamedTensors grads, std::size_t bucket_bytes) : grads_(std::move(grads)) {
  numel_ = static_cast<std::size_t>(nn::total_numel(grads_));
  flat_.resize(numel_);
  fixed_.resize(numel_);
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
  for (std::size_t b = 0; b < numel_; b += per_bucket) bucket_begin_.push_back(b);
  if (bucket_begin_.empty()) bucket_begin_.push_back(0);
}

std::size_t GradientReducer::bucket_size(std::size_t b) const {
  const std::size_t end = b + 1 < bucket_begin_.size() ? bucket_begin_[b + 1] : numel_;
  return end - bucket_begin_[b];
}

std::vector<float> GradientReducer::snapshot() const { return nn::flatten_f32(grads_); }

bool GradientReducer::sum(comm::Communicator& comm) {
  // flat_ keeps one allocation for the whole run: after a failure, a send that our allreduce
  // abandoned may still be read by MPI during the recovery, so the buffer must stay valid.
  const auto values = nn::flatten_f32(grads_);
  flat_.resize(numel_);
  std::copy(values.begin(), values.end(), flat_.begin());
  for (std::size_t b = 0; b < buckets(); ++b)
    comm::allreduce(comm, comm::kInPlace, flat_.data() + bucket_begin_[b], bucket_size(b), comm::DType::f32,
                    comm::ReduceOp::sum);
  nn::unflatten_f32(grads_, flat_);
  return std::all_of(flat_.begin(), flat_.end(), [](float v) { return std::isfinite(v); });
}

bool GradientReducer::exact_sum(comm::Communicator& comm, const std::vector<std::vector<float>>& parts,
                                std::int64_t n_total) {
  // 1. The scale of each bucket: the largest |g| over every contribution of the global batch.
  std::vector<float> maxes(buckets(), 0.0f);
  for (const auto& p : parts) {
    FTCC_CHECK_EQ(p.size(), numel_) << "exact_sum: contribution size";
    for (std::size_t b = 0; b < buckets(); ++b)
      maxes[b] = std::max(maxes[b], max_abs(std::span<const float>(p.data() + bucket_begin_[b], bucket_size(b))));
  }
  comm::allreduce(comm, comm::kInPlace, maxes.data(), maxes.size(), comm::DType::f32, comm::ReduceOp::max);
  // A non-finite contribution anywhere made its bucket's maximum +infinity (max_abs) on every rank.
  if (!std::all_of(maxes.begin(), maxes.end(), [](float m) { return std::isfinite(m); })) return false;
  // 2. Fixed point, summed locally then across ranks: integer sums do not depend on the order.
  fixed_.resize(numel_);  // same allocation every step (see sum())
  std::fill(fixed_.begin(), fixed_.end(), 0);
  std::vector<int> exps(buckets());
  for (std::size_t b = 0; b < buckets(); ++b) exps[b] = exact_sum_exponent(maxes[b], n_total);
  for (const auto& p : parts)
    for (std::size_t b = 0; b < buckets(); ++b)
      accumulate_fixed(std::span<const float>(p.data() + bucket_begin_[b], bucket_size(b)), exps[b],
                       std::span<std::int64_t>(fixed_.data() + bucket_begin_[b], bucket_size(b)));
  for (std::size_t b = 0; b < buckets(); ++b)
    comm::allreduce(comm, comm::kInPlace, fixed_.data() + bucket_begin_[b], bucket_size(b), comm::DType::i64,
                    comm::ReduceOp::sum);
  // 3. Back to float once.
  flat_.resize(numel_);
  for (std::size_t b = 0; b < buckets(); ++b)
    fixed_to_float(std::span<const std::int64_t>(fixed_.data() + bucket_begin_[b], bucket_size(b)), exps[b],
                   std::span<float>(flat_.data() + bucket_begin_[b], bucket_size(b)));
  nn::unflatten_f32(grads_, flat_);
  return true;
}

bool all_finite(const nn::NamedTensors& tensors) {
  const auto values = nn::flatten_f32(tensors);
  return std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
}

}  // namespace ftcc::train
