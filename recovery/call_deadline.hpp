// recovery/call_deadline.hpp: a deadline on the calls nothing can interrupt (MPIX_Comm_shrink,
// MPIX_Comm_agree): a rank stuck in one past the bound leaves by itself, so the others can
// exclude it instead of waiting forever.
//
//   CallDeadline d(60s, my_rank, laggard);    // one watcher thread
//   d.arm("MPIX_Comm_shrink", seq); call(); d.disarm();
//
// On expiry the watcher first asks laggard(seq) for a live peer that has not yet entered call
// number `seq` (the heartbeat carries each rank's count of entered calls). If there is one, the
// wait is that peer's doing, not this rank's: it says so once and waits on (the peer's own
// deadline, or its fencing, ends the wait), up to 4 timeouts in all. Otherwise (every peer is in
// the call too, or nobody can tell) it prints one line naming the call and the bound, records
// rank-R.left in the job folder and SIGKILLs its own process, which ULFM reports as a failure.
// A timeout of 0 turns it off.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <stop_token>
#include <thread>

namespace ftcc::recovery {

class CallDeadline {
 public:
  using LaggardCheck = std::function<int(std::uint64_t seq)>;
  // on_expire replaces the default action (record + SIGKILL self); tests use it. before_leaving
  // runs just before the default action (the group fences stopped host-mates there:
  // recovery/fence_stopped.hpp).
  CallDeadline(std::chrono::milliseconds timeout, int my_rank, LaggardCheck laggard = {},
               std::function<void(const std::string& line)> on_expire = {}, std::function<void()> before_leaving = {});
  ~CallDeadline() = default;  // the thread is asked to stop and joined
  CallDeadline(const CallDeadline&) = delete;
  CallDeadline& operator=(const CallDeadline&) = delete;

  void arm(const char* call, std::uint64_t seq);
  void disarm();
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void loop(const std::stop_token& stop);

  std::chrono::milliseconds timeout_;
  int rank_;
  LaggardCheck laggard_;
  std::function<void(const std::string&)> on_expire_;
  std::function<void()> before_leaving_;
  std::mutex mu_;                      // guards the fields below it, shared with the thread
  std::condition_variable_any cv_;     // wakes the thread when it is stopped
  bool armed_ = false, told_ = false;
  const char* call_ = "";
  std::uint64_t seq_ = 0;
  std::chrono::steady_clock::time_point since_, deadline_;
  std::jthread thread_;                // last: stopped and joined before the fields above go
};

}  // namespace ftcc::recovery
