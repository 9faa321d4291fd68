// recovery/progress_watchdog.hpp: turns a local hang (deadlock, a call that never returns) into
// a process failure that ULFM can report.
//
// The training thread calls kick() whenever it makes progress (each step, each collective
// segment, each recovery phase). A separate thread checks every timeout/4; if no kick came for
// `timeout`, it prints what it saw and SIGKILLs its own process. It cannot catch SIGSTOP (the
// watchdog thread stops too): that is the heartbeat's job. Off unless constructed with a
// positive timeout; pause()/resume() bracket phases that may legitimately block longer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <stop_token>
#include <thread>

namespace ftcc::recovery {

class ProgressWatchdog {
 public:
  // on_fire replaces the default action (SIGKILL self) — tests use it to observe the decision.
  // excused(): true while the thread legitimately waits on others (in a collective, bounded by
  // comm's own deadlines); that time does not count as lost progress.
  explicit ProgressWatchdog(std::chrono::milliseconds timeout, std::string what = "training loop",
                            std::function<void()> on_fire = {}, std::function<bool()> excused = {});
  ~ProgressWatchdog() = default;  // the thread is asked to stop and joined
  ProgressWatchdog(const ProgressWatchdog&) = delete;
  ProgressWatchdog& operator=(const ProgressWatchdog&) = delete;

  void kick() { last_kick_ns_.store(now_ns(), std::memory_order_relaxed); }
  void pause() { paused_.store(true); }
  void resume() {
    kick();
    paused_.store(false);
  }
  bool fired() const { return fired_.load(); }

 private:
  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void loop(const std::stop_token& stop);

  std::chrono::milliseconds timeout_;
  std::string what_;
  std::function<void()> on_fire_;
  std::function<bool()> excused_;
  std::atomic<std::int64_t> last_kick_ns_;
  std::atomic<bool> paused_{false}, fired_{false};
  std::mutex mu_;                   // for the thread's timed wait
  std::condition_variable_any cv_;  // wakes the thread when it is stopped
  std::jthread thread_;             // last: stopped and joined before the fields above go
};

}  // namespace ftcc::recovery
