#include "ftcc/train/step_breakdown.hpp"

#include <algorithm>
#include <numeric>

namespace ftcc::train {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::exposed_comm: return "exposed_comm";
    case Phase::optimizer: return "optimizer";
    case Phase::compute: return "compute";
    case Phase::snapshot: return "snapshot";
    case Phase::verify: return "verify";
    case Phase::at_rest: return "at_rest";
  }
  return "?";
}

void StepBreakdown::begin_step() {
  current_.fill(0.0);
  last_ = Clock::now();
}

void StepBreakdown::mark(Phase p) {
  const auto now = Clock::now();
  current_[static_cast<std::size_t>(p)] += std::chrono::duration<double, std::milli>(now - last_).count();
  marked_[static_cast<std::size_t>(p)] = true;
  last_ = now;
}

double StepBreakdown::own_ms() const {
  double t = 0;
  for (std::size_t p = 0; p < kPhases; ++p)
    if (p != static_cast<std::size_t>(Phase::exposed_comm) && p != static_cast<std::size_t>(Phase::verify) &&
        p != static_cast<std::size_t>(Phase::snapshot))
      t += current_[p];
  return t;
}

void StepBreakdown::end_step() {
  if (ended_++ == 0) return;  // the first step is left out
  if (window_.size() < kStepWindow) window_.push_back(current_);
  else window_[(ended_ - 2) % kStepWindow] = current_;
}

namespace {
double median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}
}  // namespace

nlohmann::json StepBreakdown::to_json() const {
  if (window_.empty()) return nullptr;
  nlohmann::json j{{"steps", window_.size()}};
  std::vector<double> column(window_.size()), total(window_.size());
  for (std::size_t ph = 0; ph < kPhases; ++ph) {
    if (!marked_[ph]) continue;
    for (std::size_t s = 0; s < window_.size(); ++s) column[s] = window_[s][ph];
    j[phase_name(static_cast<Phase>(ph))] = median(column);
  }
  for (std::size_t s = 0; s < window_.size(); ++s) total[s] = std::accumulate(window_[s].begin(), window_[s].end(), 0.0);
  j["total"] = median(total);
  return j;
}

}  // namespace ftcc::train
