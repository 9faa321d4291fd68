// tests/comm/thread_ranks.hpp: ranks as threads over MemoryTransport (comm/memory_transport.hpp),
// for the comm tests that need no MPI.
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/memory_transport.hpp"

namespace ftcc_test {

// Runs fn on n threads, one Communicator each (thread r: endpoint r, after on_start(r) when given);
// rethrows the first exception a thread raised.
inline void run_ranks(int n, const std::function<void(ftcc::comm::Communicator&)>& fn, double timeout_s = 30,
                      const std::function<void(int)>& on_start = {}) {
  auto world = ftcc::comm::MemoryWorld::create(n);
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      if (on_start) on_start(r);
      try {
        ftcc::comm::Communicator comm(world->endpoint(r), ftcc::comm::CommOptions{timeout_s});
        fn(comm);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace ftcc_test
