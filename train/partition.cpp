#include "ftcc/train/partition.hpp"

#include <algorithm>
#include <limits>
#include <set>

#include "ftcc/base/error.hpp"

namespace ftcc::train {

std::vector<std::int64_t> layer_costs(const std::vector<std::int64_t>& widths) {
  std::vector<std::int64_t> c;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) c.push_back(widths[i] * widths[i + 1] + widths[i + 1]);
  return c;
}

std::vector<int> partition_layers(const std::vector<std::int64_t>& cost, int parts) {
  const int L = static_cast<int>(cost.size());
  FTCC_CHECK(parts >= 1 && parts <= L) << "partition_layers: " << parts << " stages for " << L << " layers";
  std::vector<std::int64_t> prefix(static_cast<std::size_t>(L) + 1, 0);
  for (int i = 0; i < L; ++i) prefix[static_cast<std::size_t>(i) + 1] = prefix[static_cast<std::size_t>(i)] + cost[static_cast<std::size_t>(i)];
  auto sum = [&](int a, int b) { return prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)]; };
  constexpr std::int64_t inf = std::numeric_limits<std::int64_t>::max();
  // best[k][j]: smallest max stage cost cutting the first j layers into k stages.
  std::vector<std::vector<std::int64_t>> best(static_cast<std::size_t>(parts) + 1,
                                              std::vector<std::int64_t>(static_cast<std::size_t>(L) + 1, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<std::size_t>(L) + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int j = k; j <= L; ++j)
      for (int i = k - 1; i < j; ++i) {  // last stage = layers [i, j)
        if (best[static_cast<std::size_t>(k) - 1][static_cast<std::size_t>(i)] == inf) continue;
        const std::int64_t v = std::max(best[static_cast<std::size_t>(k) - 1][static_cast<std::size_t>(i)], sum(i, j));
        if (v < best[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)]) {
          best[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)] = v;
          cut[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)] = i;
        }
      }
  std::vector<int> b(static_cast<std::size_t>(parts) + 1);
  b[static_cast<std::size_t>(parts)] = L;
  for (int k = parts; k >= 1; --k) b[static_cast<std::size_t>(k) - 1] = cut[static_cast<std::size_t>(k)][static_cast<std::size_t>(b[static_cast<std::size_t>(k)])];
  return b;
}

int stage_of(const std::vector<int>& boundaries, int layer) {
  for (std::size_t s = 0; s + 1 < boundaries.size(); ++s)
    if (layer >= boundaries[s] && layer < boundaries[s + 1]) return static_cast<int>(s);
  FTCC_INVARIANT(false) << "layer " << layer << " is in no stage";
  return -1;
}

}  // namespace ftcc::train
