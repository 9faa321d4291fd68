#include "ftcc/recovery/progress_watchdog.hpp"

#include <csignal>
#include <cstdio>

namespace ftcc::recovery {

ProgressWatchdog::ProgressWatchdog(std::chrono::milliseconds timeout, std::string what, std::function<void()> on_fire,
                                   std::function<bool()> excused)
    : timeout_(timeout), what_(std::move(what)), on_fire_(std::move(on_fire)), excused_(std::move(excused)),
      last_kick_ns_(now_ns()) {
  if (timeout_.count() > 0) thread_ = std::jthread([this](const std::stop_token& stop) { loop(stop); });
}

void ProgressWatchdog::loop(const std::stop_token& stop) {
  const auto check_every = std::max(timeout_ / 4, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, stop, check_every, [] { return false; }) && !stop.stop_requested()) {
    if (paused_.load() || fired_.load()) continue;
    if (excused_ && excused_()) {
      kick();
      continue;
    }
    const double idle_s = static_cast<double>(now_ns() - last_kick_ns_.load()) * 1e-9;
    if (idle_s * 1000.0 < static_cast<double>(timeout_.count())) continue;
    fired_.store(true);
    std::fprintf(stderr, "ftcc: watchdog: no progress in the %s for %.1f s (limit %.1f s); "
                 "turning the hang into a process failure\n",
                 what_.c_str(), idle_s, static_cast<double>(timeout_.count()) / 1000.0);
    std::fflush(stderr);
    if (on_fire_) on_fire_();
    else std::raise(SIGKILL);
  }
}

}  // namespace ftcc::recovery
