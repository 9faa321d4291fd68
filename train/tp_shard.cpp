#include "ftcc/train/tp_shard.hpp"

#include <algorithm>
#include <cstring>

#include "ftcc/base/error.hpp"

namespace ftcc::train {

SliceKind slice_kind(const std::string& name, int num_layers) {
  if (name == "step") return SliceKind::full;
  const auto dot = name.find('.');
  FTCC_INVARIANT(dot != std::string::npos) << "tensor '" << name << "' is not an MLP tensor";
  const int layer = std::stoi(name.substr(0, dot)) / 2;
  const bool weight = name.compare(dot + 1, 6, "weight") == 0;
  if (layer % 2 == 0 && layer + 1 < num_layers) return SliceKind::rows;  // column-parallel W and b
  if (layer % 2 == 1) return weight ? SliceKind::cols : SliceKind::full;  // row-parallel W; b replicated
  return SliceKind::full;                                                 // unpaired last layer
}

SliceRange shard_range(std::int64_t h, int n, int r) { return {h * r / n, h * (r + 1) / n}; }

tensor::Shape shard_shape(const std::string& name, const tensor::Tensor& t, int num_layers, int n, int r) {
  tensor::Shape s = t.shape();
  switch (slice_kind(name, num_layers)) {
    case SliceKind::full: break;
    case SliceKind::rows: {
      const auto sr = shard_range(t.size(0), n, r);
      s[0] = sr.end - sr.begin;
      break;
    }
    case SliceKind::cols: {
      const auto sr = shard_range(t.size(1), n, r);
      s[1] = sr.end - sr.begin;
      break;
    }
  }
  return s;
}

std::size_t shard_bytes(const nn::NamedTensors& full, int num_layers, int n, int r) {
  std::size_t total = 0;
  for (const auto& [name, t] : full) {
    std::int64_t numel = 1;
    for (auto d : shard_shape(name, t, num_layers, n, r)) numel *= d;
    total += static_cast<std::size_t>(numel) * tensor::dtype_size(t.dtype());
  }
  return total;
}

namespace {

// Calls visit(pointer into the full tensor, length) for each of rank r's slices, in packed order.
template <class Visit>
void for_each_slice(const nn::NamedTensors& full, int num_layers, int n, int r, std::size_t packed_bytes,
                    Visit visit) {
  FTCC_INVARIANT(packed_bytes == shard_bytes(full, num_layers, n, r))
      << "shard " << r << " of " << n << ": " << packed_bytes << " bytes, expected " << shard_bytes(full, num_layers, n, r);
  for (const auto& [name, t] : full) {
    FTCC_INVARIANT(t.device() == tensor::Device::CPU) << "tp shards: '" << name << "' is not on the CPU";
    auto* f = static_cast<std::byte*>(t.raw_data());
    const std::size_t esz = tensor::dtype_size(t.dtype());
    switch (slice_kind(name, num_layers)) {
      case SliceKind::full: visit(f, t.nbytes()); break;
      case SliceKind::rows: {
        const auto sr = shard_range(t.size(0), n, r);
        const std::size_t row = t.nbytes() / static_cast<std::size_t>(t.size(0));
        visit(f + static_cast<std::size_t>(sr.begin) * row, static_cast<std::size_t>(sr.end - sr.begin) * row);
        break;
      }
      case SliceKind::cols: {
        const auto sr = shard_range(t.size(1), n, r);
        const auto cols = static_cast<std::size_t>(t.size(1));
        for (std::int64_t o = 0; o < t.size(0); ++o)
          visit(f + (static_cast<std::size_t>(o) * cols + static_cast<std::size_t>(sr.begin)) * esz,
                static_cast<std::size_t>(sr.end - sr.begin) * esz);
        break;
      }
    }
  }
}

}  // namespace

void full_to_shard(const nn::NamedTensors& full, int num_layers, int n, int r, std::span<std::byte> bytes) {
  std::byte* s = bytes.data();
  for_each_slice(full, num_layers, n, r, bytes.size(), [&](const std::byte* f, std::size_t len) {
    std::memcpy(s, f, len);
    s += len;
  });
}

void shard_to_full(const nn::NamedTensors& full, int num_layers, int n, int r, std::span<const std::byte> bytes) {
  const std::byte* s = bytes.data();
  for_each_slice(full, num_layers, n, r, bytes.size(), [&](std::byte* f, std::size_t len) {
    std::memcpy(f, s, len);
    s += len;
  });
}

std::int64_t min_split_width(const std::vector<std::int64_t>& widths) {
  std::int64_t m = 0;
  const int L = static_cast<int>(widths.size()) - 1;
  for (int i = 0; i + 1 < L; i += 2) m = m == 0 ? widths[static_cast<std::size_t>(i) + 1] : std::min(m, widths[static_cast<std::size_t>(i) + 1]);
  return m;
}

}  // namespace ftcc::train
