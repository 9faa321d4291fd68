// pytorch/csrc/process_group_monitored_barrier.cpp: dist.monitored_barrier on an ftcc group
// (process_group_ftcc.hpp states the contract): rank 0 hears from every rank within the timeout.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc_work.hpp"
#include "process_group_ftcc.hpp"

namespace ftcc::torch_backend {

void ProcessGroupFtcc::monitoredBarrier(const c10d::BarrierOptions& opts, bool) {
  const auto ms = opts.timeout.count() > 0 ? opts.timeout.count() : static_cast<long long>(
                                                                        (Runtime::existing() ? Runtime::existing()->timeout_s() : 1800.0) * 1000);
  OpTask k = task("monitored_barrier", OpClass::shared_result, true, false);
  k.result_bytes = 0;
  k.compute = [ms](comm::Communicator& c, int) {
    // Every rank takes the same tag: the group's next collective's.
    const int tag = c.next_collective_tag(comm::collective_key("monitored_barrier", 0));
    const MPI_Comm m = c.raw();
    const int me = c.rank(), n = c.size();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    static char token = 0;  // never written: the messages carry nothing
    auto poll = [&](std::vector<MPI_Request>& reqs, std::vector<char>& done, const char* what) {
      for (;;) {
        bool all = true;
        for (std::size_t i = 0; i < reqs.size(); ++i) {
          if (done[i]) continue;
          int flag = 0;
          const int rc = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
          if (rc != MPI_SUCCESS) comm::throw_mpi_error(rc, m, what, __FILE__, __LINE__);
          done[i] = static_cast<char>(flag);
          all = all && flag;
        }
        if (all || std::chrono::steady_clock::now() > deadline) return all;
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    };
    auto drop = [](std::vector<MPI_Request>& reqs, const std::vector<char>& done) {
      for (std::size_t i = 0; i < reqs.size(); ++i)
        if (!done[i] && reqs[i] != MPI_REQUEST_NULL) {
          MPI_Cancel(&reqs[i]);
          MPI_Request_free(&reqs[i]);
        }
    };
    if (me == 0) {
      std::vector<MPI_Request> reqs(static_cast<std::size_t>(n - 1), MPI_REQUEST_NULL);
      std::vector<char> in(static_cast<std::size_t>(n), 0), done(reqs.size(), 0);
      for (int r = 1; r < n; ++r) MPI_Irecv(&in[static_cast<std::size_t>(r)], 1, MPI_CHAR, r, tag, m, &reqs[static_cast<std::size_t>(r - 1)]);
      const bool all = poll(reqs, done, "monitored_barrier");
      std::vector<int> missing;
      for (std::size_t i = 0; i < done.size(); ++i)
        if (!done[i]) missing.push_back(static_cast<int>(i) + 1);
      drop(reqs, done);
      // Those that came are let go either way (a rank that arrived is not to blame).
      for (int r = 1; r < n; ++r)
        if (all || std::find(missing.begin(), missing.end(), r) == missing.end()) {
          const int rc = MPI_Send(&token, 1, MPI_CHAR, r, tag, m);
          if (rc != MPI_SUCCESS) comm::throw_mpi_error(rc, m, "monitored_barrier", __FILE__, __LINE__);
        }
      if (!missing.empty()) {
        std::ostringstream o;
        o << "monitored_barrier: " << (missing.size() == 1 ? "Rank " : "Ranks ");
        for (std::size_t i = 0; i < missing.size(); ++i) o << (i ? ", " : "") << missing[i];
        o << " failed to pass monitoredBarrier in " << ms << " ms (the rank" << (missing.size() == 1 ? "" : "s")
          << " did not call it, or called other operations of this group first)";
        throw ftcc::Error(o.str());
      }
    } else {
      // A synchronous send completes once rank 0 has taken it, that is once rank 0 is in the
      // barrier; rank 0 then decides within `ms`. So this rank waits `ms` for rank 0 to arrive,
      // then `ms` more (plus the grace) from there for the verdict: a rank on time is never told
      // "not let go" because its own clock started before rank 0's.
      std::vector<MPI_Request> sent(1, MPI_REQUEST_NULL);
      std::vector<char> sent_done(1, 0);
      int rc = MPI_Issend(&token, 1, MPI_CHAR, 0, tag, m, &sent[0]);
      if (rc != MPI_SUCCESS) comm::throw_mpi_error(rc, m, "monitored_barrier", __FILE__, __LINE__);
      const std::string late = "monitored_barrier: rank 0 did not let this rank go within " + std::to_string(ms) + " ms";
      if (!poll(sent, sent_done, "monitored_barrier")) {
        MPI_Request_free(&sent[0]);  // a send may not be cancelled; it is left to rank 0's queue
        throw ftcc::Error(late + " (rank 0 did not reach the barrier in that time)");
      }
      char ack = 0;
      std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
      std::vector<char> done(1, 0);
      MPI_Irecv(&ack, 1, MPI_CHAR, 0, tag, m, &reqs[0]);
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms + std::max<long long>(ms / 2, 200));
      if (!poll(reqs, done, "monitored_barrier")) {
        drop(reqs, done);
        throw ftcc::Error(late + " (rank 0 names the ranks that did not arrive)");
      }
    }
    return at::Tensor();
  };
  enqueue(c10d::OpType::BARRIER, std::move(k), {})->wait();
}

}  // namespace ftcc::torch_backend
