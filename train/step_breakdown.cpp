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
  last_ = now;
}

void StepBreakdown::end_step() { steps_.push_back(current_); }

namespace {
double median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}
}  // namespace

nlohmann::json StepBreakdown::to_json() const {
  if (steps_.size() < 2) return nullptr;
  nlohmann::json j{{"steps", steps_.size() - 1}};
  std::vector<double> column(steps_.size() - 1), total(steps_.size() - 1);
  for (std::size_t ph = 0; ph < kPhases; ++ph) {
    for (std::size_t s = 1; s < steps_.size(); ++s) column[s - 1] = steps_[s][ph];
    j[phase_name(static_cast<Phase>(ph))] = median(column);
  }
  for (std::size_t s = 1; s < steps_.size(); ++s)
    total[s - 1] = std::accumulate(steps_[s].begin(), steps_[s].end(), 0.0);
  j["total"] = median(total);
  return j;
}

}  // namespace ftcc::train
