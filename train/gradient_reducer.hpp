// train/gradient_reducer.hpp: sums gradients across the data-parallel ranks, in place, overlapped
// with the backward pass.
//
// The gradients of the parameters live in one contiguous buffer, the arena (llm.c's grads_memory):
// the constructor makes each parameter's gradient buffer a view into it (Tensor::set_grad_buffer),
// laid out in reverse parameter order, the order in which backward produces them, each on a 64-byte
// boundary (Eigen's kernels give other bits on other alignments: padded, a gradient computes
// exactly as in a buffer of its own; the padding is zeros, reduced with the rest). The arena is cut
// into buckets of whole tensors of at most bucket_bytes (a larger tensor is a bucket of its own);
// each bucket is one of our allreduces (comm/collectives.hpp) on its slice of the arena, in place:
// no flattening, no copies. With the engine's denominator convention (a micro-batch's loss is its
// rows' sum over the global batch: tensor::cross_entropy_loss(x, t, B), tensor::mse_loss(p, t,
// B x outputs)) a plain SUM across ranks gives the gradient of the mean loss over the global
// batch: no rescaling. docs/training.md has a whole program that uses it.
//
//   begin_overlap(comm)    before backward: as backward completes the gradients of a bucket (a
//                          hook on each parameter), the bucket's allreduce starts
//                          (comm::allreduce_async, on the progress thread), buckets in index order
//   finish_overlap()       after backward: starts the buckets not started yet (a rank with no data
//                          this step runs no backward), waits for all
//   sum(comm)              the blocking form: every bucket now
//   exact_sum(comm, parts) --deterministic: `parts` are this rank's per-micro-batch gradients;
//                          the result is bitwise the same for any rank count (train/exact_sum.hpp)
// Every rank starts the buckets in the same order (their index), so the collectives' sequence is
// the same everywhere. Each throws comm::FaultDetected when a peer dies (finish_overlap after every
// started bucket has ended, so no operation outlives the step); the gradients are then undefined
// and the step must be redone (or rolled forward) after recovery, exactly as with sum().
// Each returns whether the reduced gradients are all finite, decided from values every rank holds
// after the allreduce, so every rank gets the same answer at the same step. exact_sum leaves the
// gradients as they were (skipping the fixed-point allreduce on every rank alike) when they are not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ftcc/comm/allreduce_async.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/reduction_audit.hpp"
#include "ftcc/nn/named_tensors.hpp"
#include "ftcc/tensor/tensor.hpp"

namespace ftcc::train {

// What the last sum's audit found (--verify-reductions); all empty when it was clean or not run.
struct ReductionCheck {
  bool mismatch = false;             // some bucket's result was not the sum of its contributions
  bool repeated_clean = false;       // ... and its repeat was
  std::vector<std::size_t> buckets;  // the buckets found wrong
  std::vector<int> wrong_at;         // ranks (of the sum's communicator) that got a wrong result
  comm::LinkProbe probe;             // when the repeat was wrong too
};

class GradientReducer {
 public:
  // params: leaves that require grad, all on one device and float32.
  GradientReducer(const nn::NamedTensors& params, std::size_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void set_verify(bool on);
  bool verifying() const { return verify_; }
  const ReductionCheck& last_check() const { return check_; }

  std::size_t numel() const { return numel_; }  // the arena's, padding included
  std::size_t buckets() const { return bucket_begin_.size(); }
  // The arena: every gradient, in bucket order.
  const tensor::Tensor& arena() const { return arena_; }

  void begin_overlap(comm::Communicator& comm);
  [[nodiscard]] bool finish_overlap();
  // How many buckets of the last overlapped step started while backward was still running.
  std::size_t started_during_backward() const { return started_early_; }
  [[nodiscard]] bool sum(comm::Communicator& comm);
  // The current gradients as one flat host vector in arena order (one micro-batch's contribution).
  std::vector<float> snapshot() const;
  // n_total: how many contributions the whole global batch has (same on every rank).
  // slices_of: when the parameters are slices of tensors whose other slices other ranks hold
  // (tp shards: the same tensors in the same order on each), the ranks holding the other slices;
  // each tensor's scale then comes from its whole maximum, so an element's bits do not depend on
  // how the tensor is cut (bucket_bytes 0: a bucket per tensor). Null otherwise.
  [[nodiscard]] bool exact_sum(comm::Communicator& comm, const std::vector<std::vector<float>>& parts,
                               std::int64_t n_total, comm::Communicator* slices_of = nullptr);

 private:
  std::size_t bucket_size(std::size_t b) const;
  void ready(std::size_t bucket);
  void start_ready();
  bool arena_finite() const;
  // --verify-reductions: before bucket b's allreduce of `data` (float arena or fixed-point sums),
  // and after every bucket's.
  void keep_contribution(std::size_t b, const std::byte* data, comm::DType dtype);
  void audit(comm::Communicator& comm, std::byte* data, comm::DType dtype);

  nn::NamedTensors params_;
  tensor::Tensor arena_;
  std::size_t numel_ = 0;
  std::vector<std::size_t> bucket_begin_;  // element offsets into the arena
  std::vector<int> tensors_in_bucket_;
  // Overlap state of the current step.
  comm::Communicator* comm_ = nullptr;
  std::vector<int> pending_;               // per bucket: gradients not yet produced
  std::size_t next_ = 0;                   // the next bucket to start
  std::size_t started_early_ = 0;
  std::vector<comm::AllreduceRequest> inflight_;
  std::vector<std::int64_t> fixed_;
  std::vector<float> host_;                // host copy of a device arena (finiteness, exact_sum)
  bool verify_ = false;
  std::vector<std::byte> kept_;             // the contributions (--verify-reductions)
  std::vector<comm::SumChecksum> sums_in_;  // per bucket
  ReductionCheck check_;
};

// True when every element of every tensor is finite (a host copy for device tensors).
bool all_finite(const nn::NamedTensors& tensors);

}  // namespace ftcc::train
