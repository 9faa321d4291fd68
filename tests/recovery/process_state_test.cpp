// recovery/process_state.hpp on a real child process: running, stopped, another process under
// the same pid, killed (zombie), reaped.
#include "ftcc/recovery/process_state.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace fr = ftcc::recovery;
using namespace std::chrono_literals;

TEST(ProcessState, GoneConfirmsOnlyDeaths) {
  // The quorum rule of a recovery counts a lost rank as dead only when this is true.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (;;) pause();
  }
  const auto start = fr::process_start_time(child);
  ASSERT_NE(start, 0u);
  EXPECT_FALSE(fr::process_gone(child, start)) << "running";
  EXPECT_FALSE(fr::process_stopped(child, start)) << "running";
  kill(child, SIGSTOP);
  // Stopped once /proc says state T (the signal is delivered asynchronously).
  bool stopped = false;
  for (auto until = std::chrono::steady_clock::now() + 2000ms; !stopped && std::chrono::steady_clock::now() < until;) {
    std::ifstream in("/proc/" + std::to_string(child) + "/stat");
    std::string s;
    std::getline(in, s);
    stopped = s.find(") T ") != std::string::npos;
    if (!stopped) std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(stopped);
  EXPECT_FALSE(fr::process_gone(child, start)) << "stopped is alive (a hang, not a death)";
  EXPECT_TRUE(fr::process_stopped(child, start)) << "SIGSTOP: state T";
  EXPECT_FALSE(fr::process_stopped(child, start + 1)) << "another process under the same pid is not fenced";
  EXPECT_TRUE(fr::process_gone(child, start + 1)) << "another process under the same pid";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(fr::wait_process_gone(child, start, t0 + 50ms)) << "a stopped process does not die by waiting";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  // Fencing: SIGKILL of a stopped process, confirmed at once (the process dies a moment later).
  kill(child, SIGKILL);
  ASSERT_TRUE(fr::wait_process_gone(child, start, std::chrono::steady_clock::now() + 2000ms)) << "zombie";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(fr::process_gone(child, start)) << "reaped";
  EXPECT_FALSE(fr::process_gone(0, 0)) << "unknown pid confirms nothing";
}
