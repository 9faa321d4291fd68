// train/bit_flip.hpp: the bitflip fault (recovery/fault_spec.hpp): one bit of one element of a
// tensor flipped in place, on whatever device the tensor lives (a CUDA tensor goes through a host
// copy). What silent data corruption in memory does, on purpose, for the tests and the chaos
// campaign.
#pragma once

#include <cstdint>

#include "ftcc/tensor/tensor.hpp"

namespace ftcc::train {

// Flips bit `bit` (0 = the lowest bit of the element's first byte in memory) of element `element`.
// Throws ftcc::InvalidArgument when either is out of range for t.
void flip_bit(const tensor::Tensor& t, std::int64_t element, int bit);

// The element the bitflip fault picks: the one of largest magnitude (the first of them), so that
// the flip changes what the model computes (an element that meets only zero inputs, such as a
// weight of an always-blank pixel, would change nothing but itself). 0 for non-float32 tensors.
std::int64_t flip_target_element(const tensor::Tensor& t);

}  // namespace ftcc::train
