#include "ftcc/train/replica_verifier.hpp"

#include <algorithm>
#include <cstring>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/kept_buffer.hpp"

namespace ftcc::train {
namespace {

// splitmix64's finalizer: a bijection of 64-bit words.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::uint64_t state_digest(std::span<const std::byte> bytes) {
  constexpr std::uint64_t kStride = 0x9e3779b97f4a7c15ULL;  // word i is mixed with i * kStride: order counts
  const std::size_t words = bytes.size() / 8;
  // Four independent sums, so the multiplies of consecutive words overlap; the total is their sum.
  std::uint64_t acc[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (std::size_t k = 0; k < 4; ++k) {
      std::uint64_t w;
      std::memcpy(&w, bytes.data() + 8 * (i + k), 8);
      acc[k] += mix(w + (i + k) * kStride);
    }
  for (; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + 8 * i, 8);
    acc[0] += mix(w + i * kStride);
  }
  std::uint64_t tail = 0;  // the last bytes, zero-padded, as one more word
  if (bytes.size() % 8 != 0) std::memcpy(&tail, bytes.data() + 8 * words, bytes.size() - 8 * words);
  return acc[0] + acc[1] + acc[2] + acc[3] + mix(tail + words * kStride) + mix(bytes.size());
}

ReplicaVerdict vote(std::span<const std::uint64_t> digest, std::span<const int> position) {
  ReplicaVerdict v;
  std::map<int, std::vector<int>> at;  // position -> its ranks
  for (std::size_t r = 0; r < position.size(); ++r)
    if (position[r] >= 0) at[position[r]].push_back(static_cast<int>(r));
  for (const auto& [pos, ranks] : at) {
    std::map<std::uint64_t, int> count;
    for (int r : ranks) ++count[digest[static_cast<std::size_t>(r)]];
    if (count.size() < 2) continue;  // all alike (or one rank alone)
    const auto best = std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    if (2 * best->second <= static_cast<int>(ranks.size())) {
      ++v.undecided;
      continue;
    }
    for (int r : ranks)
      if (digest[static_cast<std::size_t>(r)] != best->first) v.odd.push_back(r);
  }
  std::sort(v.odd.begin(), v.odd.end());
  return v;
}

ReplicaVerdict verify_replicas(comm::Communicator& c, std::span<const std::byte> state) {
  const comm::KeptBuffer<std::int64_t> mine(static_cast<std::int64_t>(state_digest(state)));
  const comm::KeptBuffer<std::vector<std::int64_t>> all(static_cast<std::size_t>(c.size()));
  comm::allgather(c, mine.get(), all->data(), 1, comm::DType::i64);
  const std::vector<std::uint64_t> digests(all->begin(), all->end());
  return vote(digests, std::vector<int>(digests.size(), 0));
}

}  // namespace ftcc::train
