// train/gradient_reducer.hpp: averages (sums) gradients across the data-parallel ranks.
//
// The gradients are laid end to end (canonical parameter order) in a host buffer and cut into
// buckets of at most bucket_bytes; each bucket is one of our allreduces (comm/collectives.hpp),
// so a large model moves in large messages and a small one in one. With the engine's
// denominator convention (micro-batch loss = sum / (global batch x outputs)) a plain SUM across
// ranks gives the gradient of the mean loss over the global batch: no rescaling.
//
//   sum(comm)              float32 ring/tree/auto allreduce, in place into the gradients
//   exact_sum(comm, parts) --deterministic: `parts` are this rank's per-micro-batch gradients;
//                          the result is bitwise the same for any rank count (train/exact_sum.hpp)
// Either throws comm::FaultDetected when a peer dies; the gradients are then undefined and the
// step must be redone (or rolled forward) after recovery.
// Either returns whether the reduced gradients are all finite, decided from values every rank
// holds after the allreduce (the reduced gradients; with exact_sum the reduced bucket maxima), so
// every rank gets the same answer at the same step. exact_sum leaves the gradients as they were
// (skipping the fixed-point allreduce on every rank alike) when they are not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/nn/named_tensors.hpp"

namespace ftcc::train {

class GradientReducer {
 public:
  GradientReducer(nn::NamedTensors grads, std::size_t bucket_bytes);

  std::size_t numel() const { return numel_; }
  std::size_t buckets() const { return bucket_begin_.size(); }

  [[nodiscard]] bool sum(comm::Communicator& comm);
  // The current gradients as one flat host vector (to keep one micro-batch's contribution).
  std::vector<float> snapshot() const;
  // n_total: how many contributions the whole global batch has (same on every rank).
  [[nodiscard]] bool exact_sum(comm::Communicator& comm, const std::vector<std::vector<float>>& parts,
                               std::int64_t n_total);

 private:
  std::size_t bucket_size(std::size_t b) const;

  nn::NamedTensors grads_;
  std::size_t numel_ = 0;
  std::vector<std::size_t> bucket_begin_;  // element offsets
  std::vector<float> flat_;
  std::vector<std::int64_t> fixed_;
};

// True when every element of every tensor is finite (a host copy for device tensors).
bool all_finite(const nn::NamedTensors& tensors);

}  // namespace ftcc::train
