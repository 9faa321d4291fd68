#include "ftcc/comm/progress_thread.hpp"

namespace ftcc::comm::detail {

ProgressThread::ProgressThread() : t_([this] { loop(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_one();
  t_.join();
}

void ProgressThread::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(m_);
    q_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void ProgressThread::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stopping, and every posted job has run
      job = std::move(q_.front());
      q_.pop_front();
    }
    job();
  }
}

}  // namespace ftcc::comm::detail
