// recovery/resilient_group.cpp: ResilientGroup's construction, accessors and per-step calls.
// The rest of the class, by responsibility: recovery/group_bootstrap.cpp (the start),
// recovery/group_services.cpp (heartbeat, deadlines, watchdog, process guards),
// recovery/membership_protocol.cpp (the recovery protocol), recovery/respawn.cpp (new processes).
#include "ftcc/recovery/resilient_group.hpp"

#include <filesystem>
#include <limits>
#include <numeric>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/group_internals.hpp"
#include "ftcc/recovery/heal_plan.hpp"
#include "ftcc/recovery/process_state.hpp"
#include "ftcc/recovery/mpi_ft_comm.hpp"
#include "ftcc/recovery/process_spawn.hpp"

namespace ftcc::recovery {

ResilientGroup::ResilientGroup(MPI_Comm parent, GroupOptions options)
    : opt_(std::move(options)), env_(GroupEnvironment::read()) {
  int world = 0;
  MPI_Comm_size(parent, &world);
  MPI_Comm spawner = MPI_COMM_NULL;  // set in a process started by a respawn (recovery/respawn.cpp)
  MPI_Comm_get_parent(&spawner);
  if (spawner == MPI_COMM_NULL) detail::validate_options(opt_, world);  // a new process's job was checked when it started
  if (!opt_.allow_without_ulfm) comm::require_ulfm("ResilientGroup (set GroupOptions::allow_without_ulfm to run without fault tolerance)");
  fault_tolerant_ = comm::has_ulfm();
  confirm_gone_ = [this](int r, Steady::time_point by) {
    return wait_process_gone(peer(r).pid, peer(r).start_time, by);
  };
  detail::install_process_guards();
  if (spawner != MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    join_as_respawned(MpiFtComm::take(merge_with_parent(spawner), opt_.comm_timeout_s), /*simulated=*/false);
    return;
  }
  int parent_rank = 0;
  MPI_Comm_rank(parent, &parent_rank);
  job_record::joining(parent_rank);  // so a group that never forms names who did come up
  bootstrap(parent);
  // The first group on record: from now on a process of an earlier group is superseded.
  fence_.begin(job_id_, ulfm_members());
  job_record::formed(static_cast<int>(pool_members().size()));  // by every rank: one is enough
}

ResilientGroup::ResilientGroup(Simulated sim, GroupOptions options) : opt_(std::move(options)), fence_("") {
  FTCC_CHECK(sim.world && sim.confirm_gone) << "ResilientGroup(Simulated): a world and confirm_gone are required";
  const int n = sim.world->size();
  if (!sim.respawned) detail::validate_options(opt_, n);
  if (opt_.hang_timeout.count() != 0 || opt_.progress_timeout.count() != 0 || opt_.ulfm_timeout_s >= 0 ||
      !opt_.faults.empty() || opt_.allow_without_ulfm)
    throw ftcc::InvalidArgument("ResilientGroup(Simulated): the simulation runs without heartbeat, progress watchdog, "
                                "ULFM-call deadline, fault specs or the no-ULFM mode; set hang_timeout and "
                                "progress_timeout to 0, ulfm_timeout_s to -1 and no faults");
  sim_host_of_ = std::move(sim.host_of);
  confirm_gone_ = [f = std::move(sim.confirm_gone)](int r, Steady::time_point) { return f(r); };
  if (sim.respawned) {
    join_as_respawned(std::move(sim.world), /*simulated=*/true);
    return;
  }
  comm_ = std::move(sim.world);
  my_original_rank_ = comm_->rank();
  members_.resize(static_cast<size_t>(n));
  std::iota(members_.begin(), members_.end(), 0);
  job_id_ = sim.job_id;
  FTCC_CHECK(sim_host_of_.empty() || sim_host_of_.size() >= static_cast<size_t>(n + std::max(0, opt_.respawns)))
      << "ResilientGroup(Simulated): host_of names " << sim_host_of_.size() << " processes of " << n << " and "
      << opt_.respawns << " respawn(s)";
  for (int r = 0; r < n; ++r) peers_.push_back(simulated_address(r));
  initial_pool_ = peers_.size();
  initial_training_ = n - opt_.spares;
  respawns_left_ = opt_.respawns;
  form_pool();
}

PeerAddress ResilientGroup::simulated_address(int original_rank) const {
  PeerAddress p;
  p.rank = original_rank;
  p.host = p.host_id = "simulated-" + std::to_string(sim_host_of_.empty() ? 0 : sim_host_of_.at(static_cast<size_t>(original_rank)));
  return p;
}

ResilientGroup::~ResilientGroup() {
  watchdog_.reset();
  deadline_.reset();
  if (detector_) detector_->stop();
  // Not after QuorumLost: the scratch folder is per job and host, and the majority that goes on
  // may share this host's /tmp (simulated hosts do).
  // Nor after Superseded: the job that went on without this process still uses it.
  if (comm_ && comm_->rank() == 0 && !event_dir_.empty() && !quorum_lost_ && !superseded_) {
    std::error_code ignored;
    std::filesystem::remove_all(event_dir_, ignored);
  }
}

comm::Communicator& ResilientGroup::comm() {
  FTCC_CHECK(comm_) << "ResilientGroup::comm() on hot spare (rank " << my_original_rank_
                    << "): a spare has no training group until wait_as_spare() returns true";
  comm::Communicator* c = comm_->communicator();
  FTCC_CHECK(c) << "ResilientGroup::comm() in a simulated process: it has no comm::Communicator; use ft_comm()";
  return *c;
}

FtComm& ResilientGroup::ft_comm() {
  FTCC_CHECK(comm_) << "ResilientGroup::ft_comm() on hot spare (rank " << my_original_rank_
                    << "): a spare has no training group until wait_as_spare() returns true";
  return *comm_;
}

comm::Communicator& ResilientGroup::pool() {
  if (!pool_) return comm();
  comm::Communicator* c = pool_->communicator();
  FTCC_CHECK(c) << "ResilientGroup::pool() in a simulated process: it has no comm::Communicator; use ft_pool()";
  return *c;
}

bool ResilientGroup::reports() const {
  if (!pool_) return comm_ && comm_->rank() == 0;
  // From the slots, not the training group: inside a recovery (a job-level error) the group may be
  // the old one, whose rank 0 may be gone. The live process with the lowest slot speaks; with no
  // slot holder alive, the pool's rank 0.
  int best = -1, best_slot = std::numeric_limits<int>::max();
  for (int r : pool_members_) {
    const int s = slots_.at(static_cast<size_t>(r));
    if (s >= 0 && s < best_slot) best = r, best_slot = s;
  }
  return best >= 0 ? best == my_original_rank_ : pool_->rank() == 0;
}

int ResilientGroup::spares_left() const {
  return static_cast<int>(std::count(slots_.begin(), slots_.end(), kSpare));
}

void ResilientGroup::install_fault_hook() {
  if (!injector_.enabled() || !comm_ || !comm_->communicator()) return;  // free when off: no hook at all
  comm_->communicator()->set_fault_hook([this](const char* op, int protocol_step) {
    if (auto phase = FaultInjector::phase_of_op(op)) injector_.in_phase(*phase, protocol_step);
  });
}

void ResilientGroup::begin_step(std::int64_t step) {
  step_ = step;
  if (watchdog_) watchdog_->kick();
  injector_.at_step(step);
}

void ResilientGroup::check_current(const std::string& what) const {
  try {
    fence_.check(job_id_, my_original_rank_, what);
  } catch (const Superseded&) {
    superseded_ = true;
    throw;
  }
}


}  // namespace ftcc::recovery
