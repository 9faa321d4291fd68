// recovery/group_services.cpp: the services that run beside a ResilientGroup's protocol: the
// heartbeat's callbacks (report, notify MPI, self-fence when excluded), the ULFM-call deadline,
// the progress watchdog, and the process guards (exit without MPI_Finalize, SIGPIPE).
#include <signal.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/recovery/fence_stopped.hpp"
#include "ftcc/recovery/group_internals.hpp"
#include "ftcc/recovery/mpi_failure_notice.hpp"
#include "ftcc/recovery/resilient_group.hpp"

namespace ftcc::recovery {
namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// See "Exit guard" in the header. on_exit (not atexit) so the record can say the status.
void exit_without_finalize_guard(int status, void*) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) job_record::exited(status);
  if (!initialized || finalized) return;
  std::fprintf(stderr, "ftcc: process exiting with status %d without MPI_Finalize: turning it into a process "
                       "failure (SIGKILL) so the survivors can recover\n", status);
  std::fflush(stderr);
  job_record::left("exited with status " + std::to_string(status) + " without MPI_Finalize");
  std::raise(SIGKILL);
}

// SIGPIPE would kill a healthy process without a record: Open MPI's TCP transport writes with
// send() without MSG_NOSIGNAL, and a write to a peer that has gone (killed by a fault, or past
// MPI_Finalize and exited) raises it. Seen in MPI_Finalize (async_mpi_finalize: no fence, so ranks
// leave at different times): btl/tcp's finalize (mca_btl_tcp_endpoint_close ->
// mca_btl_tcp_send_blocking -> send) writes on every TCP connection, and a write to a process that
// had already exited killed the writer, a survivor with no exited record. On one host only the
// connections to processes a respawn started (another job: no shared memory) are TCP; across
// hosts, every connection is. Ignored, the write fails with EPIPE, which the transport handles.
// A disposition the program chose is kept (Python, so ftcc_torch, ignores SIGPIPE itself).
void ignore_sigpipe() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) return;
  struct sigaction sa {};
  sa.sa_handler = SIG_IGN;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGPIPE, &sa, nullptr);
}


}  // namespace

namespace detail {

void install_process_guards() {
  static const bool guard_installed = on_exit(exit_without_finalize_guard, nullptr) == 0;
  (void)guard_installed;
  ignore_sigpipe();
}

}  // namespace detail

void ResilientGroup::start_services() {
  if (detector_) {
    // This process's name by value: the callback runs on the heartbeat thread, and peers_ may
    // grow meanwhile (respawn).
    const MpiProcessName me{peer(my_original_rank_).mpi_nspace, peer(my_original_rank_).mpi_rank};
    detector_->set_on_suspect([this, me](const Suspicion& s) {
      // Runs on the heartbeat thread: no MPI here but the PMIx event (recovery/mpi_failure_notice.hpp).
      const PeerAddress& p = s.peer;
      if (s.reported_by == my_original_rank_ && s.silent_s > 0) {
        const auto began = detail::wall_ns() - static_cast<std::int64_t>(s.silent_s * 1e9);
        std::int64_t seen = silence_began_ns_.load();
        while ((seen == 0 || began < seen) && !silence_began_ns_.compare_exchange_weak(seen, began)) {
        }
      }
      const bool told_mpi = !p.mpi_nspace.empty() && !me.nspace.empty() &&
                            notify_process_failed(me, {p.mpi_nspace, p.mpi_rank});
      // The rank that found it silent, and the one that fenced it, say so; the others heard the
      // news and stay quiet (one line per suspect, not one per rank).
      if (s.reported_by != my_original_rank_ && !s.fenced_by_me) return;
      std::string what = s.reported_by == my_original_rank_
                             ? "silent for " + fmt_seconds(s.silent_s)
                             : "reported silent by rank " + std::to_string(s.reported_by);
      std::fprintf(stderr, "ftcc: rank %d (host %s, pid %d) %s at step %lld: %s%s\n", p.rank, p.host.c_str(), p.pid,
                   what.c_str(), static_cast<long long>(step_),
                   s.fenced_by_me ? ("fenced (SIGKILL) by rank " + std::to_string(my_original_rank_)).c_str()
                                  : "suspected (a rank on its host fences it; if none can, the others go on without it)",
                   told_mpi ? "; failed in MPI" : "");
    });
    detector_->set_on_excluded([this](int by) {
      // The others suspected this rank (it was stopped, hung or cut off) and went on without it:
      // it must not take part in anything again. Self-fencing, as a rank on its host would do.
      leave_excluded("excluded by the survivors (rank " + std::to_string(by) + " lists it as suspected): self-fenced (SIGKILL)");
    });
    std::vector<PeerAddress> alive;  // a new process is handed the lost ones too
    for (int r : pool_members()) alive.push_back(peers_.at(static_cast<size_t>(r)));
    detector_->start(alive, secret_, job_id_);
  }
  job_record::started(my_original_rank_);
  const double ulfm_s = detail::ulfm_timeout_of(opt_.ulfm_timeout_s, env_);
  if (ulfm_s > 0)
    deadline_ = std::make_unique<CallDeadline>(
        std::chrono::milliseconds(static_cast<long long>(ulfm_s * 1000)), my_original_rank_,
        [this](std::uint64_t seq) { return detector_ ? detector_->peer_behind(static_cast<std::uint32_t>(seq)) : -1; },
        std::function<void(const std::string&)>{}, [this] { fence_stopped_host_mates(*this, "a ULFM call passed its deadline"); });
  if (opt_.progress_timeout.count() > 0)
    watchdog_ = std::make_unique<ProgressWatchdog>(
        opt_.progress_timeout, "loop of rank " + std::to_string(my_original_rank_) + " (begin_step)",
        [] {
          job_record::left("progress watchdog: no step began within --progress-timeout");
          std::raise(SIGKILL);
        },
        [] { return comm::waits_in_progress() > 0; });
}

void ResilientGroup::leave_excluded(const std::string& why) {
  std::fprintf(stderr, "ftcc: rank %d %s at step %lld\n", my_original_rank_, why.c_str(), static_cast<long long>(step_));
  std::fflush(stderr);
  job_record::left(why);
  std::raise(SIGKILL);
  std::abort();  // not reached: SIGKILL cannot be caught
}

const HeartbeatStats ResilientGroup::heartbeat_stats() const { return detector_ ? detector_->stats() : HeartbeatStats{}; }

}  // namespace ftcc::recovery
