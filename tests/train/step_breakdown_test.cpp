// train/step_breakdown: time goes to the phase marked after it, the first step is left out of
// the medians, and a step that never ended is not counted.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ftcc/train/step_breakdown.hpp"

namespace ftcc::train {
namespace {

void busy(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

TEST(StepBreakdown, PhasesGetTheTimeBeforeTheirMarkAndTheFirstStepIsLeftOut) {
  StepBreakdown t;
  EXPECT_TRUE(t.to_json().is_null());
  // Step 1 (left out): a long forward that must not reach the medians.
  t.begin_step();
  busy(std::chrono::milliseconds(60));
  t.mark(Phase::forward);
  t.end_step();
  for (int s = 0; s < 3; ++s) {
    t.begin_step();
    busy(std::chrono::milliseconds(2));
    t.mark(Phase::forward);
    busy(std::chrono::milliseconds(12));
    t.mark(Phase::backward);
    busy(std::chrono::milliseconds(3));
    t.mark(Phase::backward);  // two marks of one phase in a step add up
    t.end_step();
  }
  t.begin_step();  // a step that threw: begun, never ended
  busy(std::chrono::milliseconds(30));
  t.mark(Phase::optimizer);
  const auto j = t.to_json();
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["steps"], 3);
  EXPECT_GE(j["forward"].get<double>(), 2.0);
  EXPECT_LT(j["forward"].get<double>(), 30.0);  // not step 1's 60 ms
  EXPECT_GE(j["backward"].get<double>(), 15.0);
  EXPECT_EQ(j["optimizer"].get<double>(), 0.0);  // only the unfinished step had any
  // Phases never marked are not named: dp's summary has no "compute", pp's and tp's no "forward".
  EXPECT_FALSE(j.contains("data")) << j.dump();
  EXPECT_FALSE(j.contains("compute")) << j.dump();
  EXPECT_GE(j["total"].get<double>(), 17.0);
  EXPECT_LT(j["total"].get<double>(), 60.0);
}

TEST(StepBreakdown, ALongRunKeepsABoundedWindow) {
  StepBreakdown t;
  for (std::size_t s = 0; s < kStepWindow + 1000; ++s) {
    t.begin_step();
    t.mark(Phase::data);
    t.end_step();
  }
  EXPECT_EQ(t.steps(), kStepWindow + 1000);
  EXPECT_EQ(t.to_json()["steps"], kStepWindow);
}

}  // namespace
}  // namespace ftcc::train
