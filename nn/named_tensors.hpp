// nn/named_tensors.hpp: an ordered list of (name, tensor) pairs (parameters, optimizer state,
// the contents of a safetensors file) and flat-buffer views of it.
//
// The order is canonical: Module::named_parameters() and Optimizer::state_dict() always list the
// same names in the same order on every rank, so a trainer can hash, broadcast or compare the
// concatenation of the buffers. Two ways to move a whole list through a raw-buffer collective:
//  * in place, tensor by tensor: for (auto& [n, t] : list) bcast(t.raw_data(), t.nbytes(), ...)
//    (zero copies; CPU or device pointers);
//  * packed: pack_bytes() -> one host byte buffer in list order, unpack_bytes() writes it back.
// flatten_f32()/unflatten_f32() do the same as float32 values (for lists that are all float32, e.g.
// parameters and gradients).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ftcc/tensor/tensor.hpp"

namespace ftcc::nn {

using tensor::Tensor;
using NamedTensor = std::pair<std::string, Tensor>;
using NamedTensors = std::vector<NamedTensor>;

std::int64_t total_numel(const NamedTensors& list);
std::size_t total_bytes(const NamedTensors& list);

// Host copy of every tensor's bytes, concatenated in list order.
std::vector<std::byte> pack_bytes(const NamedTensors& list);
// Writes `bytes` (as produced by pack_bytes of a list with the same layout) back into the tensors.
void unpack_bytes(const NamedTensors& list, std::span<const std::byte> bytes);

// float32-only variants; throw naming the first tensor that is not float32.
std::vector<float> flatten_f32(const NamedTensors& list);
void unflatten_f32(const NamedTensors& list, std::span<const float> values);

// The gradients of a parameter list, with the same names (undefined grads are refused).
NamedTensors gradients_of(const NamedTensors& params);

}  // namespace ftcc::nn
