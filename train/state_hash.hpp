// train/state_hash.hpp: SHA-256 of named tensors in their canonical order (names, shapes and
// raw bytes), the fingerprint that says two replicas are bitwise identical.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "ftcc/nn/named_tensors.hpp"

namespace ftcc::train {

using Digest = std::array<std::uint8_t, 32>;

Digest sha256_of(const nn::NamedTensors& list);
Digest sha256_of_bytes(std::span<const std::byte> bytes);
std::string to_hex(const Digest& d);

}  // namespace ftcc::train
