// data/dataset.hpp: an in-memory supervised dataset (features [N, F] and targets [N, T], float32),
// and what training needs around it: gathering a batch by sample ids, a deterministic
// train/held-out split, feature standardization fitted on the training part, one-hot targets.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ftcc/tensor/tensor.hpp"

namespace ftcc::data {

using tensor::Tensor;

struct Batch {
  Tensor x, y;  // contiguous copies: micro-batches are then x.rows(b, e) views of them
};

struct Dataset {
  Tensor features;          // [N, F] float32, CPU
  Tensor targets;           // [N, T] float32, CPU
  std::vector<int> labels;  // class ids for classification data sets (empty for regression)

  std::int64_t size() const { return features.defined() ? features.size(0) : 0; }
  std::int64_t num_features() const { return features.size(1); }
  std::int64_t num_targets() const { return targets.size(1); }
  // Rows `ids` (any order, repeats allowed) copied into a contiguous batch on `device`.
  Batch gather(std::span<const std::int64_t> ids, tensor::Device device = tensor::Device::CPU) const;
  Dataset subset(std::span<const std::int64_t> ids) const;
};

// Splits off round(fraction * N) samples as the held-out part, chosen by a Philox permutation of
// (seed): the same split on every rank and platform. Returns {train, held_out}.
std::pair<Dataset, Dataset> train_test_split(const Dataset& d, double held_out_fraction, std::uint64_t seed);

// Per-feature mean and standard deviation (population) fitted on one data set and applied to
// others. Constant features (std 0, e.g. always-blank digit pixels) are centred and left unscaled.
struct Standardizer {
  std::vector<double> mean, stddev;
  static Standardizer fit(const Tensor& x);  // x: [N, F] features
  Tensor apply(const Tensor& x) const;        // new tensor
};

// [N, classes] float32 with 1 at (i, labels[i]).
Tensor one_hot(std::span<const int> labels, int classes);

// Index of the largest output per row (ties: the first): the predicted class of a classifier.
std::vector<int> argmax_rows(const Tensor& outputs);

}  // namespace ftcc::data
