// comm/blocks.hpp: how a buffer is cut into per-rank blocks and pipeline segments (internal).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ftcc::comm::detail {

// A range of elements: [offset, offset + count).
struct Block {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// Part i of `count` cut into `parts` nearly equal pieces (the first count % parts get one more).
inline Block balanced_part(std::size_t count, std::size_t parts, std::size_t i) {
  const std::size_t q = count / parts, r = count % parts;
  return {i * q + std::min(i, r), q + (i < r ? 1 : 0)};
}

inline std::vector<Block> balanced_blocks(std::size_t count, int parts) {
  std::vector<Block> out(static_cast<std::size_t>(parts));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = balanced_part(count, out.size(), i);
  return out;
}

// Number of pipeline segments for blocks of at most max_count elements of elem_size bytes when a
// segment should hold about segment_bytes (at least one segment, even for empty blocks).
inline std::size_t segments_for(std::size_t max_count, std::size_t elem_size, std::size_t segment_bytes) {
  const std::size_t seg_elems = std::max<std::size_t>(1, segment_bytes / elem_size);
  return std::max<std::size_t>(1, (max_count + seg_elems - 1) / seg_elems);
}

// The segment size an algorithm uses: the caller's if given (tests use tiny ones), else `floor`
// raised so that a transfer of `bytes` takes at most `max_segments` segments. Every message costs
// a rendezvous handshake, which is cheap with a core per rank but can cost a scheduler time
// slice when ranks share cores, so the default keeps the message count bounded while still
// pipelining a few segments (docs/collectives.md has the measurements).
inline std::size_t pick_segment_bytes(std::size_t requested, std::size_t floor, std::size_t bytes,
                                      std::size_t max_segments) {
  if (requested) return requested;
  return std::max(floor, (bytes + max_segments - 1) / max_segments);
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace ftcc::comm::detail
