#include "ftcc/recovery/call_deadline.hpp"

#include <csignal>
#include <cstdio>

#include "ftcc/recovery/job_outcome.hpp"

namespace ftcc::recovery {

using Clock = std::chrono::steady_clock;

CallDeadline::CallDeadline(std::chrono::milliseconds timeout, int my_rank, LaggardCheck laggard,
                           std::function<void(const std::string&)> on_expire, std::function<void()> before_leaving)
    : timeout_(timeout),
      rank_(my_rank),
      laggard_(std::move(laggard)),
      on_expire_(std::move(on_expire)),
      before_leaving_(std::move(before_leaving)) {
  if (timeout_.count() > 0) thread_ = std::jthread([this](const std::stop_token& stop) { loop(stop); });
}

void CallDeadline::arm(const char* call, std::uint64_t seq) {
  if (timeout_.count() <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
  told_ = false;
  call_ = call;
  seq_ = seq;
  since_ = Clock::now();
  deadline_ = since_ + timeout_;
}

void CallDeadline::disarm() {
  if (timeout_.count() <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void CallDeadline::loop(const std::stop_token& stop) {
  const auto tick = std::max(timeout_ / 20, std::chrono::milliseconds(5));
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (cv_.wait_for(lock, stop, tick, [] { return false; }) || stop.stop_requested()) return;
    if (!armed_ || Clock::now() < deadline_) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - since_).count();
    const int behind = laggard_ ? laggard_(seq_) : -1;
    if (behind >= 0 && Clock::now() < since_ + 4 * timeout_) {
      if (!told_)
        std::fprintf(stderr, "ftcc: rank %d has waited %.1f s in %s for rank %d, which has not reached it "
                     "(it still heartbeats); waiting for it to arrive or to be excluded\n",
                     rank_, waited, call_, behind);
      told_ = true;
      deadline_ = Clock::now() + tick;
      continue;
    }
    char line[256];
    std::snprintf(line, sizeof line, "%s did not return within %.1f s (the deadline of ULFM calls, "
                  "--ulfm-timeout / FTCC_ULFM_TIMEOUT_S)", call_, waited);
    armed_ = false;
    if (on_expire_) {
      on_expire_(line);
      continue;
    }
    std::fprintf(stderr, "ftcc: rank %d: %s: leaving so the other ranks can exclude this one\n", rank_, line);
    std::fflush(stderr);
    job_record::left(std::string("deadline: ") + line);
    if (before_leaving_) before_leaving_();
    std::raise(SIGKILL);
  }
}

}  // namespace ftcc::recovery
