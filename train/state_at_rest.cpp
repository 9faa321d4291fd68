#include "ftcc/train/state_at_rest.hpp"

#include <span>

#include "ftcc/train/replica_verifier.hpp"

namespace ftcc::train {

namespace {
void add(std::uint64_t& d, const nn::NamedTensors& ts) {
  for (const auto& [name, t] : ts) {
    if (!t.defined()) continue;
    const tensor::Tensor host = t.device() == tensor::Device::CPU ? t : t.to(tensor::Device::CPU);
    d = d * 0x100000001b3ULL + state_digest(std::span(static_cast<const std::byte*>(host.raw_data()), host.nbytes()));
  }
}
}  // namespace

std::uint64_t tensors_digest(const nn::NamedTensors& params, const nn::NamedTensors& optimizer_state) {
  std::uint64_t d = 0;
  add(d, params);
  add(d, optimizer_state);
  return d;
}

void StateAtRest::seal(const nn::NamedTensors& params, const nn::NamedTensors& optimizer_state) {
  sealed_ = tensors_digest(params, optimizer_state);
}

bool StateAtRest::check(const nn::NamedTensors& params, const nn::NamedTensors& optimizer_state) {
  if (!sealed_ || tensors_digest(params, optimizer_state) == *sealed_) return true;
  ++caught_;
  sealed_.reset();
  return false;
}

}  // namespace ftcc::train
