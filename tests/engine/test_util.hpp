// tests/engine/test_util.hpp: small helpers shared by the engine tests (random tensors from the
// engine's own Philox, so inputs are identical on every platform).
#pragma once

#include <vector>

#include "ftcc/tensor/random.hpp"
#include "ftcc/tensor/tensor.hpp"

namespace ftcc::test {

// Uniform in [lo, hi), as float64 (gradient checks) or float32.
inline tensor::Tensor random_tensor(const tensor::Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0,
                                    tensor::DType dtype = tensor::DType::f64) {
  tensor::Philox rng(seed, 7);
  std::vector<double> v(static_cast<std::size_t>(tensor::shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * rng.uniform_f64(i);
  return tensor::Tensor::from_vector(shape, std::span<const double>(v), dtype);
}

}  // namespace ftcc::test
