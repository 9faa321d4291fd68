#include "ftcc/train/straggler_watch.hpp"

#include <algorithm>
#include <cstdio>

namespace ftcc::train {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

std::vector<int> StragglerWatch::observe(std::span<const double> own_ms, std::span<const int> members) {
  std::vector<double> counted;
  for (double t : own_ms)
    if (t >= 0) counted.push_back(t);
  slowdown_.clear();
  others_.clear();
  std::vector<int> reached;
  if (counted.size() < 2) return reached;  // nothing to compare with
  median_ = median(counted);
  for (std::size_t i = 0; i < own_ms.size() && i < members.size(); ++i) {
    const int r = members[i];
    if (own_ms[i] < 0) {
      streak_.erase(r);
      continue;
    }
    // Against the others alone: with two ranks the median of all would hold the slow one itself.
    std::vector<double> rest;
    for (std::size_t j = 0; j < own_ms.size(); ++j)
      if (j != i && own_ms[j] >= 0) rest.push_back(own_ms[j]);
    const double ref = median(rest);
    others_[r] = ref;
    slowdown_[r] = ref > 0 ? own_ms[i] / ref : 1.0;
    if (ref > 0 && own_ms[i] > factor_ * ref) {
      if (++streak_[r] == window_) reached.push_back(r);
    } else {
      streak_.erase(r);
    }
  }
  return reached;
}

double StragglerWatch::others_ms(int original_rank) const {
  const auto it = others_.find(original_rank);
  return it == others_.end() ? 0.0 : it->second;
}

double StragglerWatch::slowdown(int original_rank) const {
  const auto it = slowdown_.find(original_rank);
  return it == slowdown_.end() ? 0.0 : it->second;
}

double predicted_step_without(double median_ms, int n) {
  return n > 1 ? median_ms * n / (n - 1) : 0.0;
}

bool evict_pays(double slow_ms, double median_ms, int n) {
  return n > 1 && predicted_step_without(median_ms, n) < slow_ms;
}

namespace {
std::string fixed(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}
}  // namespace

EvictionDecision decide_eviction(double own_ms, double median_ms, int active, int replicas, int model,
                                 std::string_view newcomer) {
  if (replicas < 2) return {false, "; not evicted: no other model replica holds its part"};
  if (!newcomer.empty()) return {true, "; evicting it: a " + std::string(newcomer) + " takes its place"};
  if (model > 1) return {false, "; not evicted: no hot spare or respawn to take its place in its model replica"};
  const std::string predicted = "predicted " + fixed(predicted_step_without(median_ms, active)) + " ms per step on " +
                                std::to_string(active - 1) + " ranks";
  if (!evict_pays(own_ms, median_ms, active)) return {false, "; not evicted: " + predicted + ", no faster than " + fixed(own_ms) + " ms now"};
  return {true, "; evicting it: " + predicted + " against " + fixed(own_ms) + " ms now"};
}

}  // namespace ftcc::train
