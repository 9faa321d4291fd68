#include "ftcc/recovery/run_job.hpp"

#include <signal.h>

#include <csignal>
#include <cstdio>
#include <memory>

#include "ftcc/comm/errors.hpp"
#include "ftcc/recovery/fence_stopped.hpp"
#include "ftcc/recovery/job_outcome.hpp"
#include "ftcc/recovery/quorum_lost.hpp"

namespace ftcc::recovery {
namespace {

// This rank leaves alone, without MPI_Finalize (the others would wait for it there).
ExitStatus leave(const JobOptions& job, int rank, ExitStatus status, const std::string& why) {
  if (job.quiet) return status;
  std::fprintf(stderr, "%s: rank %d: %s\n", job.name.c_str(), rank, why.c_str());
  std::fflush(stderr);
  return status;
}

// A process the job went on without (it was stopped and excluded, and woke up): it writes nothing
// and leaves without MPI_Finalize (the exit guard turns that into a process failure).
ExitStatus superseded(const JobOptions& job, const Superseded& e) {
  job_record::left(std::string("superseded: ") + e.what());
  return leave(job, e.rank(), ExitStatus::internal, e.what());
}

}  // namespace

int run_job(MPI_Comm parent, const GroupOptions& options, const std::function<void(ResilientGroup&)>& body,
            const JobOptions& job) {
  int world_rank = 0;
  MPI_Comm_rank(parent, &world_rank);
  std::unique_ptr<ResilientGroup> g;
  try {
    g = std::make_unique<ResilientGroup>(parent, options);
  } catch (const ftcc::InvalidArgument& e) {
    // Options are checked before any communication, so every rank refuses alike: say it once.
    if (world_rank == 0) std::fprintf(stderr, "%s: %s\n", job.name.c_str(), e.what());
    MPI_Finalize();
    job_record::refused(world_rank, static_cast<int>(ExitStatus::config_error));
    return static_cast<int>(ExitStatus::config_error);
  } catch (const comm::NotSupported& e) {
    if (world_rank == 0) std::fprintf(stderr, "%s: %s\n", job.name.c_str(), e.what());
    MPI_Finalize();
    job_record::refused(world_rank, static_cast<int>(ExitStatus::config_error));
    return static_cast<int>(ExitStatus::config_error);
  } catch (const std::exception& e) {
    job_record::left(std::string("could not start the fault-tolerant group: ") + e.what());
    return static_cast<int>(leave(job, world_rank, ExitStatus::internal, std::string("could not start the fault-tolerant group: ") + e.what()));
  }
  const JobEnd end = run_on_group(*g, body, job);
  if (end.alone) return static_cast<int>(end.status);  // without MPI_Finalize (see the header)
  g.reset();
  MPI_Finalize();
  return static_cast<int>(end.status);
}

JobEnd run_on_group(ResilientGroup& group, const std::function<void(ResilientGroup&)>& body, const JobOptions& job) {
  ResilientGroup* g = &group;
  const int me = g->original_rank();
  ExitStatus status = ExitStatus::finished;
  try {
    try {
      body(*g);
      g->clear_recovery_hooks();
      while (!g->all_finished(/*last=*/true)) {
      }
    } catch (const JobError&) {
      throw;
    } catch (const Superseded&) {
      throw;
    } catch (const QuorumLost&) {
      throw;
    } catch (const comm::Timeout&) {
      throw;
    } catch (const comm::FaultDetected& e) {
      // A revocation reaches ranks still inside the body when another rank raised a job-level
      // error (it revoked to call the others in): join the protocol as a plain survivor, which
      // throws that rank's JobError. Only if nobody carries one was a rank really lost where
      // the body no longer recovers.
      g->clear_recovery_hooks();
      g->recover(g->committed_step(), e.what());
      g->fail_job(ExitStatus::job_error, std::string("a rank was lost where the program does not recover: ") + e.what());
    } catch (const std::exception& e) {
      // A hot spare (or a new process from a respawn) that could not get ready holds no state and
      // trains nothing: it leaves alone, like a lost process; the others remove it (or the
      // recovery that started it goes on without it) instead of stopping the job for it.
      if (g->is_spare()) {
        job_record::left(std::string("hot spare could not get ready: ") + e.what());
        return {leave(job, me, ExitStatus::job_error, std::string("hot spare could not get ready: ") + e.what()), true};
      }
      g->clear_recovery_hooks();
      // By kind: the caller's input (2), ftcc's own invariant (1, a bug), anything else the job
      // met (4: a file, a non-finite loss, an error on one rank).
      const bool config = dynamic_cast<const ftcc::InvalidArgument*>(&e) != nullptr;
      const bool internal = dynamic_cast<const ftcc::InternalError*>(&e) != nullptr;
      g->fail_job(config ? ExitStatus::config_error : internal ? ExitStatus::internal : ExitStatus::job_error, e.what());
    }
  } catch (const JobError& e) {
    status = e.status();
    if (!e.agreed()) return {leave(job, me, status, e.line()), true};  // no ULFM: only this rank knows
    if (g->reports()) {
      try {
        g->check_current("reporting the job's outcome");
      } catch (const Superseded& s) {
        return {superseded(job, s), true};
      }
      if (!job.quiet) {
        std::fprintf(stderr, "%s: %s\n", job.name.c_str(), e.line().c_str());
        std::fflush(stderr);
      }
      job_record::outcome(status, e.line(), g->initial_size(), g->size(), g->new_processes_lost());
    }
  } catch (const Superseded& e) {
    return {superseded(job, e), true};
  } catch (const QuorumLost& e) {
    return {leave(job, me, ExitStatus::quorum_lost, e.what()), true};
  } catch (const comm::Timeout& e) {
    job_record::left(std::string("deadline: ") + e.what());
    fence_stopped_host_mates(*g, "a collective timed out");
    return {leave(job, me, ExitStatus::internal,
                  std::string(e.what()) + ": leaving so the other ranks can exclude this one"),
            true};
  }
  if (status == ExitStatus::finished && g->rank() == 0) {
    try {
      g->check_current("reporting the job's outcome");
    } catch (const Superseded& e) {
      return {superseded(job, e), true};
    }
    job_record::outcome(status, "finished on " + std::to_string(g->size()) + " of " + std::to_string(g->initial_size()) + " ranks",
                        g->initial_size(), g->size(), g->new_processes_lost());
  }
  return {status, false};
}

}  // namespace ftcc::recovery
