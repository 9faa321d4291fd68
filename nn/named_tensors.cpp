#include "ftcc/nn/named_tensors.hpp"

#include <cstring>

#include "ftcc/base/error.hpp"

namespace ftcc::nn {

std::int64_t total_numel(const NamedTensors& list) {
  std::int64_t n = 0;
  for (const auto& [name, t] : list) n += t.numel();
  return n;
}

std::size_t total_bytes(const NamedTensors& list) {
  std::size_t n = 0;
  for (const auto& [name, t] : list) n += t.nbytes();
  return n;
}

std::vector<std::byte> pack_bytes(const NamedTensors& list) {
  std::vector<std::byte> out(total_bytes(list));
  std::size_t at = 0;
  for (const auto& [name, t] : list) {
    tensor::copy_bytes(out.data() + at, tensor::Device::CPU, t.raw_data(), t.device(), t.nbytes());
    at += t.nbytes();
  }
  return out;
}

void unpack_bytes(const NamedTensors& list, std::span<const std::byte> bytes) {
  FTCC_CHECK(bytes.size() == total_bytes(list)) << "unpack_bytes: " << bytes.size() << " bytes for tensors of "
                                                << total_bytes(list) << " bytes";
  std::size_t at = 0;
  for (const auto& [name, t] : list) {
    tensor::copy_bytes(t.raw_data(), t.device(), bytes.data() + at, tensor::Device::CPU, t.nbytes());
    at += t.nbytes();
  }
}

std::vector<float> flatten_f32(const NamedTensors& list) {
  std::vector<float> out(static_cast<std::size_t>(total_numel(list)));
  std::size_t at = 0;
  for (const auto& [name, t] : list) {
    FTCC_CHECK(t.dtype() == tensor::DType::f32) << "flatten_f32: tensor '" << name << "' is "
                                                << tensor::dtype_name(t.dtype());
    tensor::copy_bytes(out.data() + at, tensor::Device::CPU, t.raw_data(), t.device(), t.nbytes());
    at += static_cast<std::size_t>(t.numel());
  }
  return out;
}

void unflatten_f32(const NamedTensors& list, std::span<const float> values) {
  FTCC_CHECK(static_cast<std::int64_t>(values.size()) == total_numel(list))
      << "unflatten_f32: " << values.size() << " values for tensors of " << total_numel(list) << " elements";
  std::size_t at = 0;
  for (const auto& [name, t] : list) {
    FTCC_CHECK(t.dtype() == tensor::DType::f32) << "unflatten_f32: tensor '" << name << "' is "
                                                << tensor::dtype_name(t.dtype());
    tensor::copy_bytes(t.raw_data(), t.device(), values.data() + at, tensor::Device::CPU, t.nbytes());
    at += static_cast<std::size_t>(t.numel());
  }
}

NamedTensors gradients_of(const NamedTensors& params) {
  NamedTensors out;
  out.reserve(params.size());
  for (const auto& [name, p] : params) {
    FTCC_CHECK(p.grad().defined()) << "gradients_of: parameter '" << name << "' has no gradient buffer";
    out.emplace_back(name, p.grad());
  }
  return out;
}

}  // namespace ftcc::nn
