// CallDeadline: quiet while disarmed or within the bound; fires once past it; waits on (up to 4
// timeouts) while a peer has not reached the call; names the call in its line.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "ftcc/base/error.hpp"
#include "ftcc/recovery/call_deadline.hpp"
#include "ftcc/recovery/fault_spec.hpp"

using namespace std::chrono_literals;
namespace fr = ftcc::recovery;

namespace {
struct Fired {
  std::mutex mu;
  std::string line;
  std::atomic<int> count{0};
  void operator()(const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    line = l;
    ++count;
  }
};
}  // namespace

TEST(CallDeadline, QuietWithinTheBoundAndWhenDisarmed) {
  Fired f;
  fr::CallDeadline d(200ms, 0, {}, [&](const std::string& l) { f(l); });
  for (int i = 0; i < 5; ++i) {
    d.arm("MPIX_Comm_agree", static_cast<std::uint64_t>(i + 1));
    std::this_thread::sleep_for(50ms);
    d.disarm();
  }
  std::this_thread::sleep_for(400ms);  // disarmed: nothing to watch
  EXPECT_EQ(f.count.load(), 0);
}

TEST(CallDeadline, FiresOnceNamingTheCall) {
  Fired f;
  fr::CallDeadline d(100ms, 3, {}, [&](const std::string& l) { f(l); });
  d.arm("MPIX_Comm_shrink", 1);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(f.count.load(), 1);
  std::lock_guard<std::mutex> lock(f.mu);
  EXPECT_NE(f.line.find("MPIX_Comm_shrink did not return within"), std::string::npos) << f.line;
}

TEST(CallDeadline, WaitsForALaggardThenGivesUpAfterFourTimeouts) {
  Fired f;
  std::atomic<bool> behind{true};
  fr::CallDeadline d(100ms, 0, [&](std::uint64_t) { return behind.load() ? 2 : -1; },
                     [&](const std::string& l) { f(l); });
  d.arm("MPIX_Comm_agree", 7);
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(f.count.load(), 0) << "a peer has not reached the call: not this rank's fault";
  std::this_thread::sleep_for(450ms);
  EXPECT_EQ(f.count.load(), 1) << "bounded: after 4 timeouts it leaves anyway";
}

TEST(CallDeadline, ZeroIsOff) {
  Fired f;
  fr::CallDeadline d(0ms, 0, {}, [&](const std::string& l) { f(l); });
  d.arm("MPIX_Comm_agree", 1);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.count.load(), 0);
}

TEST(FaultSpecRecoveryPoints, ParsesTheNewKindsAndPhases) {
  auto s = fr::parse_fault_spec("stall:rank=1:step=3:phase=shrink");
  EXPECT_EQ(s.kind, fr::FaultKind::stall);
  EXPECT_EQ(s.phase, fr::FaultPhase::shrink);
  EXPECT_EQ(fr::parse_fault_spec("kill:rank=0:step=1:phase=agree").phase, fr::FaultPhase::agree);
  EXPECT_EQ(fr::parse_fault_spec("kill:rank=0:step=1:phase=hooks").phase, fr::FaultPhase::hooks);
  EXPECT_EQ(fr::parse_fault_spec("segv:rank=2:step=9").kind, fr::FaultKind::segv);
  EXPECT_EQ(fr::parse_fault_spec("throw:rank=2:step=9").kind, fr::FaultKind::throw_error);
  EXPECT_THROW(fr::parse_fault_spec("throw:rank=2:step=9:phase=agree"), ftcc::InvalidArgument)
      << "an exception inside the protocol's own calls is not a fault a user can meet";
  EXPECT_EQ(fr::parse_fault_spec("invariant:rank=1:step=5").kind, fr::FaultKind::invariant);
  EXPECT_EQ(fr::parse_fault_spec("invariant:rank=1:step=5:phase=hooks").phase, fr::FaultPhase::hooks);
  EXPECT_THROW(fr::parse_fault_spec("invariant:rank=1:step=5:phase=shrink"), ftcc::InvalidArgument);
}
