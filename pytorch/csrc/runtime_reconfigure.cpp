// pytorch/csrc/runtime_reconfigure.cpp: the runtime's half of torch's reconfigure (runtime.hpp:
// reconfigure_group): the members' meeting, then the group formed on the universe, on the sentinel.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "runtime.hpp"

namespace ftcc::torch_backend {

void Runtime::meet(const std::vector<int>& members, std::int64_t uuid, double timeout_s) {
  // Each member sends every other its (uuid, digest of the member list) and waits for theirs, on a
  // tag of the universe nothing else uses (past the liveness receives'). ULFM fails a receive from
  // a dead process, which MPI_Comm_create_group alone would wait for without end.
  std::uint64_t digest = 1469598103934665603ull;
  for (int m : members) digest = (digest ^ static_cast<std::uint64_t>(m)) * 1099511628211ull;
  const std::vector<int> alive = universe_->members();
  MPI_Comm u = universe_->comm().raw();
  const int tag = universe_->comm().liveness_tag() + 1;
  struct Peer {
    int job_rank, at;
    std::int64_t got[2];
    MPI_Request recv = MPI_REQUEST_NULL;
    bool matched = false;
    std::int64_t seen_uuid = 0;
    bool seen_other = false;
  };
  std::vector<Peer> peers;
  for (int m : members)
    if (m != original_rank_)
      peers.push_back(Peer{m, static_cast<int>(std::find(alive.begin(), alive.end(), m) - alive.begin()), {0, 0}});
  if (peers.empty()) return;
  // The sends' buffer outlives a failed meeting (a send to a dead peer may never complete; its
  // request is freed, not waited for): one small allocation per reconfigure, kept.
  auto* mine = new std::int64_t[2]{uuid, static_cast<std::int64_t>(digest)};
  std::vector<MPI_Request> sends(peers.size(), MPI_REQUEST_NULL);
  auto abandon = [&] {
    for (auto& p : peers)
      if (p.recv != MPI_REQUEST_NULL) {
        MPI_Cancel(&p.recv);
        MPI_Request_free(&p.recv);
      }
    for (auto& r : sends)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  };
  for (std::size_t i = 0; i < peers.size(); ++i) {
    MPI_Isend(mine, 2, MPI_INT64_T, peers[i].at, tag, u, &sends[i]);
    MPI_Irecv(peers[i].got, 2, MPI_INT64_T, peers[i].at, tag, u, &peers[i].recv);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    bool all = true;
    for (auto& p : peers) {
      if (p.matched) continue;
      int flag = 0;
      const int rc = MPI_Test(&p.recv, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        abandon();
        comm::throw_mpi_error(rc, u, "reconfigure (the members' meeting)", __FILE__, __LINE__);
      }
      if (flag && p.got[0] == mine[0] && p.got[1] == mine[1]) {
        p.matched = true;
        continue;
      }
      if (flag) {  // another reconfigure's message (an earlier one that failed, or a disagreement)
        p.seen_uuid = p.got[0];
        p.seen_other = true;
        MPI_Irecv(p.got, 2, MPI_INT64_T, p.at, tag, u, &p.recv);
      }
      all = false;
    }
    if (all) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<int> absent;
      std::string other;
      for (auto& p : peers)
        if (!p.matched) {
          absent.push_back(p.job_rank);
          if (p.seen_other)
            other += "; rank " + std::to_string(p.job_rank) + " called it with uuid " + std::to_string(p.seen_uuid) +
                     (p.seen_uuid == uuid ? " and other handles" : "");
        }
      abandon();
      std::ostringstream o;
      o << "reconfigure(uuid " << uuid << "): ranks " << rank_list(absent) << " of the job did not call it with the "
        << "same uuid and handles within " << timeout_s << " s" << other
        << "; every member must call reconfigure with the same uuid and handles";
      throw ftcc::Error(o.str());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  for (auto& r : sends) {
    // Every peer received it: the sends are complete or completing.
    if (MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS && r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  delete[] mine;
}

std::shared_ptr<GroupRunner> Runtime::reconfigure_group(const std::string& name, const std::vector<int>& members,
                                                        std::int64_t uuid, double timeout_s) {
  std::shared_ptr<GroupRunner> g;
  run_on_sentinel([&] {
    // At most one failure met while forming the group is recovered here; a second one is the
    // caller's to retry (a fresh uuid), like any error of reconfigure.
    for (int attempt = 0;; ++attempt) {
      bool pending = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (fatal_) throw ftcc::Error("reconfigure: the job cannot go on here: " + fatal_->message);
        FTCC_CHECK(!ended_) << "reconfigure: the program has already ended its part of the job (ftcc_torch.finish)";
        pending = recovery_requested_;
      }
      if (pending) recover_all();
      // Every member decides on the same agreed set (the universe's survivors after the
      // recovery every member took part in), so every member refuses alike.
      const std::vector<int> alive = universe_->members();
      std::vector<int> failed;
      for (int m : members)
        if (std::find(alive.begin(), alive.end(), m) == alive.end()) failed.push_back(m);
      if (!failed.empty())
        throw ftcc::Error("reconfigure: the handles name " + std::string(failed.size() == 1 ? "a process" : "processes") +
                          " that failed (ranks " + rank_list(failed) +
                          " of the job); reconfigure with the survivors' handles and a fresh uuid");
      try {
        meet(members, uuid, timeout_s);
        std::unique_ptr<comm::Communicator> c = make_communicator(members, name);
        g = std::make_shared<GroupRunner>(*this, name, members, nullptr, std::move(c), false);
        break;
      } catch (const comm::FaultDetected& e) {
        if (attempt > 0) throw;
        request_recovery(name + ": forming the group: " + e.what());
      }
    }
    // The program that reconfigures does its own recovery: calls in flight when a member is lost
    // raise RankFailure, and the program reconfigures again.
    g->set_transparent(false);
    std::lock_guard<std::mutex> lock(mu_);
    groups_.push_back(g);
  });
  return g;
}

}  // namespace ftcc::torch_backend
