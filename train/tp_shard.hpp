// train/tp_shard.hpp: how the tensors of an MLP are split Megatron-style over n ranks, and the
// copies between a full model's state and one rank's shard of it. No MPI; unit-tested in
// tests/train/tp_shard_test.cpp.
//
// Layers go in pairs (0,1), (2,3), ...: the first of a pair is column-parallel (rank r holds the
// rows [h r / n, h (r+1) / n) of its weight [h, in] and of its bias: a slice of the h hidden
// features), the second is row-parallel (rank r holds the same columns of its weight [out, h];
// its bias is replicated and added once, after the partial outputs are summed). With an odd
// number of layers the last one is replicated on every rank. Optimizer tensors follow their
// parameter; the optimizer's "step" is replicated.
//
// A shard is the list of a rank's tensors (parameters, then the optimizer state, in the canonical
// order of the full model's lists) with those slices as shapes; shard_bytes, full_to_shard and
// shard_to_full move it between its packed bytes (nn::pack_bytes of the rank's own lists) and the
// full model's lists, so a new rank count re-splits a model assembled from the shards of the old one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>
#include <string>

#include "ftcc/nn/named_tensors.hpp"

namespace ftcc::train {

enum class SliceKind { full, rows, cols };

// How the tensor `name` ("<module>.weight", "<module>.bias", "<param>.<state>" or "step") of an
// MLP with num_layers layers is split.
SliceKind slice_kind(const std::string& name, int num_layers);

struct SliceRange {
  std::int64_t begin = 0, end = 0;
};
// The hidden features [h r / n, h (r+1) / n) that rank r of n holds.
SliceRange shard_range(std::int64_t h, int n, int r);

// Shape of rank r's slice of the full tensor `t` named `name`.
tensor::Shape shard_shape(const std::string& name, const tensor::Tensor& t, int num_layers, int n, int r);

// Byte size of rank r's shard of `full` (parameters + optimizer state lists, concatenated).
std::size_t shard_bytes(const nn::NamedTensors& full, int num_layers, int n, int r);

// Copies rank r's slices of `full` into the packed shard `bytes` (full_to_shard), or back
// (shard_to_full). Replicated tensors are copied whole. `bytes` must be shard_bytes() long.
void full_to_shard(const nn::NamedTensors& full, int num_layers, int n, int r, std::span<std::byte> bytes);
void shard_to_full(const nn::NamedTensors& full, int num_layers, int n, int r, std::span<const std::byte> bytes);

// The smallest hidden width of a column/row pair (the most ranks tp can split over); 0 when
// the model has no pair (fewer than 2 layers).
std::int64_t min_split_width(const std::vector<std::int64_t>& widths);

}  // namespace ftcc::train
