// comm/progress_thread.hpp: the thread that runs a communicator's nonblocking collectives
// (comm/allreduce_async.hpp), one per Communicator, started on first use.
//
// Jobs run one after the other in the order they were posted (the order of their collective
// tags), so one thread serves every nonblocking operation of its communicator: no thread per call.
// The destructor runs what is still queued (each job ends by its own deadline, at once on a
// revoked or freed communicator) and joins, so a request never waits for a job that will not run.
// Internal to comm/.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ftcc::comm::detail {

class ProgressThread {
 public:
  ProgressThread();
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  void post(std::function<void()> job);

 private:
  void loop();
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::thread t_;
};

}  // namespace ftcc::comm::detail
