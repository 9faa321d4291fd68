#include "ftcc/train/gradient_reducer.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/kept_buffer.hpp"
#include "ftcc/train/exact_sum.hpp"

namespace ftcc::train {
namespace {
// Every gradient starts on a 64-byte boundary of the arena: the kernels' vector loads and stores
// then see the same alignment as in a buffer of its own (and their results the same bits).
constexpr std::size_t kAlignFloats = 64 / sizeof(float);
std::size_t padded(std::size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }
}  // namespace

GradientReducer::GradientReducer(const nn::NamedTensors& params, std::size_t bucket_bytes) : params_(params) {
  FTCC_CHECK(!params_.empty()) << "GradientReducer: no parameters";
  const tensor::Device dev = params_.front().second.device();
  for (const auto& [name, p] : params_) {
    FTCC_CHECK(p.requires_grad() && p.grad().defined() && p.dtype() == tensor::DType::f32 && p.device() == dev)
        << "GradientReducer: parameter '" << name << "' is not a float32 leaf requiring grad on the first one's device";
    numel_ += padded(static_cast<std::size_t>(p.numel()));
  }
  arena_ = tensor::Tensor::zeros({static_cast<std::int64_t>(numel_)}, tensor::DType::f32, dev);
  // Reverse parameter order: the last layer's gradients (backward's first) open the arena.
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
  std::size_t at = 0;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    const auto& p = it->second;
    const auto n = padded(static_cast<std::size_t>(p.numel()));
    // A new bucket when this tensor would overfill a bucket that already holds something.
    if (bucket_begin_.empty() || (at > bucket_begin_.back() && at - bucket_begin_.back() + n > per_bucket)) {
      bucket_begin_.push_back(at);
      tensors_in_bucket_.push_back(0);
    }
    p.set_grad_buffer(arena_.view(static_cast<std::int64_t>(at), p.shape()));
    ++tensors_in_bucket_.back();
    const std::size_t bucket = bucket_begin_.size() - 1;
    p.set_grad_hook([this, bucket] { ready(bucket); });
    at += n;
  }
  pending_.assign(buckets(), 0);
}

GradientReducer::~GradientReducer() {
  for (const auto& [name, p] : params_) p.set_grad_hook(nullptr);
}

std::size_t GradientReducer::bucket_size(std::size_t b) const {
  const std::size_t end = b + 1 < bucket_begin_.size() ? bucket_begin_[b + 1] : numel_;
  return end - bucket_begin_[b];
}

void GradientReducer::begin_overlap(comm::Communicator& comm) {
  // A step that ended by an exception between begin and finish left its buckets: end them first.
  for (auto& r : inflight_) {
    try {
      r.wait();
    } catch (...) {  // that step is being redone; its error was (or will be) reported by its own path
    }
  }
  inflight_.clear();
  check_ = {};
  comm_ = &comm;
  pending_ = tensors_in_bucket_;
  next_ = 0;
}

void GradientReducer::ready(std::size_t bucket) {
  if (comm_ == nullptr || pending_[bucket] <= 0) return;  // not overlapping (sum, exact_sum, snapshots)
  --pending_[bucket];
  start_ready();
}

void GradientReducer::set_verify(bool on) {
  FTCC_REQUIRE(!on || arena_.device() == tensor::Device::CPU)
      << "--verify-reductions: the gradient sum is checked on CPU arenas only (this one is on a GPU)";
  verify_ = on;
}

void GradientReducer::keep_contribution(std::size_t b, const std::byte* data, comm::DType dtype) {
  const std::size_t w = comm::dtype_size(dtype), at = bucket_begin_[b] * w, n = bucket_size(b);
  kept_.resize(numel_ * sizeof(std::int64_t));  // room for either dtype; one allocation for the run
  sums_in_.resize(buckets());
  std::memcpy(kept_.data() + at, data + at, n * w);
  sums_in_[b] = comm::sum_checksum(data + at, n, dtype);
}

void GradientReducer::audit(comm::Communicator& comm, std::byte* data, comm::DType dtype) {
  const std::size_t w = comm::dtype_size(dtype);
  std::vector<comm::SumChecksum> out(buckets());
  for (std::size_t b = 0; b < buckets(); ++b) out[b] = comm::sum_checksum(data + bucket_begin_[b] * w, bucket_size(b), dtype);
  const comm::ReductionAudit first = comm::audit_reductions(comm, sums_in_, out, dtype);
  if (first.clean()) return;
  check_.mismatch = true;
  check_.buckets = first.bad_buffers;
  check_.wrong_at = first.wrong_at;
  // Once more from the kept contributions, the same buckets on every rank (the verdict is shared).
  std::vector<comm::SumChecksum> in_again, out_again;
  for (std::size_t b : first.bad_buffers) {
    std::byte* at = data + bucket_begin_[b] * w;
    std::memcpy(at, kept_.data() + bucket_begin_[b] * w, bucket_size(b) * w);
    comm::allreduce(comm, comm::kInPlace, at, bucket_size(b), dtype, comm::ReduceOp::sum);
    in_again.push_back(sums_in_[b]);
    out_again.push_back(comm::sum_checksum(at, bucket_size(b), dtype));
  }
  const comm::ReductionAudit second = comm::audit_reductions(comm, in_again, out_again, dtype);
  check_.repeated_clean = second.clean();
  if (check_.repeated_clean) return;
  const std::size_t b = first.bad_buffers[second.bad_buffers.front()];
  check_.probe = comm::probe_links(comm, kept_.data() + bucket_begin_[b] * w, bucket_size(b) * w);
}

void GradientReducer::start_ready() {
  float* base = arena_.data();
  while (next_ < buckets() && pending_[next_] == 0) {
    if (verify_) keep_contribution(next_, reinterpret_cast<const std::byte*>(base), comm::DType::f32);
    inflight_.push_back(comm::allreduce_async(*comm_, comm::kInPlace, base + bucket_begin_[next_], bucket_size(next_),
                                              comm::DType::f32, comm::ReduceOp::sum));
    ++next_;
  }
}

bool GradientReducer::finish_overlap() {
  FTCC_CHECK(comm_ != nullptr) << "GradientReducer::finish_overlap without begin_overlap";
  started_early_ = next_;
  std::fill(pending_.begin(), pending_.end(), 0);  // a rank without data starts every bucket now
  start_ready();
  comm::Communicator& comm = *comm_;
  comm_ = nullptr;
  // Wait for every bucket, even after one failed, so no operation outlives the step.
  std::exception_ptr first;
  for (auto& r : inflight_) {
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  inflight_.clear();
  if (first) std::rethrow_exception(first);
  if (verify_) audit(comm, reinterpret_cast<std::byte*>(arena_.data()), comm::DType::f32);
  return arena_finite();
}

bool GradientReducer::sum(comm::Communicator& comm) {
  // The arena keeps one allocation for the whole run: after a failure, a send that our allreduce
  // abandoned may still be read by MPI during the recovery, so the buffer must stay valid.
  check_ = {};
  float* base = arena_.data();
  auto* bytes = reinterpret_cast<std::byte*>(base);
  for (std::size_t b = 0; b < buckets(); ++b) {
    if (verify_) keep_contribution(b, bytes, comm::DType::f32);
    comm::allreduce(comm, comm::kInPlace, base + bucket_begin_[b], bucket_size(b), comm::DType::f32,
                    comm::ReduceOp::sum);
  }
  if (verify_) audit(comm, bytes, comm::DType::f32);
  return arena_finite();
}

namespace {
// No NaN or infinity among v: an exponent field of all ones. Branch-free within blocks of 4096
// (the compiler vectorises the OR), so a step's check runs at memory speed.
bool finite(const float* v, std::size_t n) {
  constexpr std::uint32_t kExponent = 0x7f800000u;
  for (std::size_t s = 0; s < n; s += 4096) {
    const std::size_t e = std::min(n, s + 4096);
    std::uint32_t bad = 0;
    for (std::size_t i = s; i < e; ++i) bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v[i]) & kExponent) == kExponent);
    if (bad != 0) return false;
  }
  return true;
}
}  // namespace

bool GradientReducer::arena_finite() const {
  if (arena_.device() == tensor::Device::CPU) return finite(arena_.data(), numel_);
  const auto host = arena_.to_vector();
  return finite(host.data(), host.size());
}

std::vector<float> GradientReducer::snapshot() const { return arena_.to_vector(); }

bool GradientReducer::exact_sum(comm::Communicator& comm, const std::vector<std::vector<float>>& parts,
                                std::int64_t n_total, comm::Communicator* slices_of) {
  check_ = {};
  // 1. The scale of each bucket: the largest |g| over every contribution of the global batch.
  // On the heap and kept if the allreduce fails: a late message may still land in it.
  const comm::KeptBuffer<std::vector<float>> kept(buckets(), 0.0f);
  std::vector<float>& maxes = *kept;
  for (const auto& p : parts) {
    FTCC_INVARIANT_EQ(p.size(), numel_) << "exact_sum: contribution size";
    for (std::size_t b = 0; b < buckets(); ++b)
      maxes[b] = std::max(maxes[b], max_abs(std::span<const float>(p.data() + bucket_begin_[b], bucket_size(b))));
  }
  comm::allreduce(comm, comm::kInPlace, maxes.data(), maxes.size(), comm::DType::f32, comm::ReduceOp::max);
  if (slices_of != nullptr) {
    FTCC_INVARIANT_EQ(buckets(), params_.size()) << "exact_sum over slices needs a bucket per tensor";
    comm::allreduce(*slices_of, comm::kInPlace, maxes.data(), maxes.size(), comm::DType::f32, comm::ReduceOp::max);
  }
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
  auto* fixed_bytes = reinterpret_cast<std::byte*>(fixed_.data());
  for (std::size_t b = 0; b < buckets(); ++b) {
    if (verify_) keep_contribution(b, fixed_bytes, comm::DType::i64);
    comm::allreduce(comm, comm::kInPlace, fixed_.data() + bucket_begin_[b], bucket_size(b), comm::DType::i64,
                    comm::ReduceOp::sum);
  }
  if (verify_) audit(comm, fixed_bytes, comm::DType::i64);
  // 3. Back to float once, into the arena.
  host_.resize(numel_);
  for (std::size_t b = 0; b < buckets(); ++b)
    fixed_to_float(std::span<const std::int64_t>(fixed_.data() + bucket_begin_[b], bucket_size(b)), exps[b],
                   std::span<float>(host_.data() + bucket_begin_[b], bucket_size(b)));
  arena_.copy_(tensor::Tensor::from_vector({static_cast<std::int64_t>(numel_)}, host_));
  return true;
}

bool all_finite(const nn::NamedTensors& tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const auto& named) {
    const tensor::Tensor& t = named.second;
    if (t.device() == tensor::Device::CPU && t.dtype() == tensor::DType::f32)
      return finite(t.data(), static_cast<std::size_t>(t.numel()));
    const auto host = t.to_vector_f64();  // another device or dtype: checked on a host copy
    return std::all_of(host.begin(), host.end(), [](double v) { return std::isfinite(v); });
  });
}

}  // namespace ftcc::train
