#include "ftcc/train/parallel_grid.hpp"

#include <algorithm>
#include <tuple>

#include "ftcc/base/error.hpp"

namespace ftcc::train {

std::vector<int> ParallelGrid::replica_ranks(int k) const {
  std::vector<int> out;
  for (int p = 0; p < model; ++p) out.push_back(k * model + p);
  return out;
}

std::vector<int> ParallelGrid::position_ranks(int p) const {
  std::vector<int> out;
  for (int k = 0; k < replicas; ++k) out.push_back(k * model + p);
  return out;
}

std::pair<std::int64_t, std::int64_t> ParallelGrid::rows_of(int k, std::int64_t batch) const {
  return {k * batch / replicas, (k + 1) * batch / replicas};
}

ParallelGrid::MicroBatches ParallelGrid::micro_batches_of(int k, std::int64_t batch, std::int64_t micro_batches,
                                                           bool shared) const {
  FTCC_CHECK(k >= 0 && k < replicas && batch >= 0 && micro_batches >= 1)
      << "micro_batches_of(" << k << ", " << batch << ", " << micro_batches << ") on " << describe();
  MicroBatches out;
  if (!shared) {
    std::tie(out.begin, out.end) = rows_of(k, batch);
    const std::int64_t rows = out.end - out.begin, m = std::min(micro_batches, rows);
    for (std::int64_t j = 0; j <= m; ++j) out.cuts.push_back(m == 0 ? 0 : j * rows / m);
    return out;
  }
  const std::int64_t m = std::min(micro_batches, batch);
  const std::int64_t first = k * m / replicas, last = (k + 1) * m / replicas;  // its micro-batches
  const auto cut = [&](std::int64_t j) { return m == 0 ? 0 : j * batch / m; };
  out.begin = cut(first);
  out.end = cut(last);
  for (std::int64_t j = first; j <= last; ++j) out.cuts.push_back(cut(j) - out.begin);
  return out;
}

std::string ParallelGrid::describe() const {
  std::string s = std::to_string(replicas) + (replicas == 1 ? " replica x " : " replicas x ") + std::to_string(model) +
                  (model == 1 ? " rank" : " ranks");
  if (active() < ranks) s += ", " + std::to_string(ranks - active()) + " idle";
  return s;
}

ParallelGrid choose_grid(int ranks, int model_size, int max_model, std::int64_t batch, std::int64_t micro_batches) {
  FTCC_CHECK(ranks >= 1 && max_model >= 1 && model_size >= 1 && batch >= 1 && micro_batches >= 0)
      << "choose_grid(" << ranks << ", " << model_size << ", " << max_model << ", " << batch << ", " << micro_batches << ")";
  // No rank holds more of the model than the user asked for: models of at least model_size ranks
  // (fewer only when fewer ranks or cuts are left, then as many as there are).
  const int lo = std::min({model_size, ranks, max_model}), hi = std::min(ranks, max_model);
  // The useful work of a grid as a fraction num / den: its busy ranks, times a pipeline's share
  // of time not in the bubble, M / (M + m - 1) for M micro-batches over m stages.
  const auto score = [&](int m, int d) -> std::pair<std::int64_t, std::int64_t> {
    const std::int64_t busy = static_cast<std::int64_t>(m) * d;
    if (micro_batches == 0) return {busy, 1};
    const std::int64_t M = std::min(micro_batches, batch / d);
    return {busy * M, M + m - 1};
  };
  ParallelGrid best{ranks, lo, 0};
  std::pair<std::int64_t, std::int64_t> best_score{0, 1};
  for (int m = lo; m <= hi; ++m) {
    const int d = static_cast<int>(std::min<std::int64_t>(ranks / m, batch));
    if (d < 1) continue;
    const auto sc = score(m, d);
    if (sc.first * best_score.second > best_score.first * sc.second) {
      best = ParallelGrid{ranks, m, d};
      best_score = sc;
    }
  }
  return best;
}

}  // namespace ftcc::train
