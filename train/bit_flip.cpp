#include "ftcc/train/bit_flip.hpp"

#include <cmath>

#include "ftcc/base/error.hpp"

namespace ftcc::train {

void flip_bit(const tensor::Tensor& t, std::int64_t element, int bit) {
  const auto size = static_cast<int>(dtype_size(t.dtype()));
  FTCC_REQUIRE(element >= 0 && element < t.numel()) << "bitflip: element " << element << " of a tensor of " << t.numel();
  FTCC_REQUIRE(bit >= 0 && bit < 8 * size) << "bitflip: bit " << bit << " of a " << size << "-byte element";
  const tensor::Tensor host = t.device() == tensor::Device::CPU ? t : t.to(tensor::Device::CPU);
  auto* byte = static_cast<unsigned char*>(host.raw_data()) + element * size + bit / 8;
  *byte = static_cast<unsigned char>(*byte ^ (1u << (bit % 8)));
  if (t.device() != tensor::Device::CPU) t.copy_(host);
}

std::int64_t flip_target_element(const tensor::Tensor& t) {
  if (t.dtype() != DType::f32 || t.numel() == 0) return 0;
  const std::vector<float> v = t.to_vector();
  std::int64_t best = 0;
  for (std::size_t i = 1; i < v.size(); ++i)
    if (std::fabs(v[i]) > std::fabs(v[static_cast<std::size_t>(best)])) best = static_cast<std::int64_t>(i);
  return best;
}

}  // namespace ftcc::train
