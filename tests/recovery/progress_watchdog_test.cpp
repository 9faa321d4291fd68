// Progress watchdog: quiet while kicked or paused, fires once progress stops.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "ftcc/recovery/progress_watchdog.hpp"

using namespace std::chrono_literals;
namespace fr = ftcc::recovery;

TEST(ProgressWatchdog, QuietWhileKickedFiresWhenStuck) {
  std::atomic<int> fires{0};
  fr::ProgressWatchdog wd(200ms, "test loop", [&] { ++fires; });
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(50ms);
    wd.kick();
  }
  EXPECT_EQ(fires.load(), 0);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(fires.load(), 1);
  EXPECT_TRUE(wd.fired());
}

TEST(ProgressWatchdog, PausedDoesNotFire) {
  std::atomic<int> fires{0};
  fr::ProgressWatchdog wd(100ms, "test loop", [&] { ++fires; });
  wd.pause();
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(fires.load(), 0);
  wd.resume();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fires.load(), 0);
}

TEST(ProgressWatchdog, ZeroTimeoutIsOff) {
  std::atomic<int> fires{0};
  fr::ProgressWatchdog wd(0ms, "off", [&] { ++fires; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fires.load(), 0);
}

TEST(ProgressWatchdog, WaitingOnPeersIsExcused) {
  std::atomic<int> fires{0};
  std::atomic<bool> in_collective{true};
  fr::ProgressWatchdog wd(100ms, "test loop", [&] { ++fires; }, [&] { return in_collective.load(); });
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(fires.load(), 0) << "time spent waiting for peers is bounded by comm's deadlines, not this one";
  in_collective = false;
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(fires.load(), 1);
}
