// recovery/mpi_failure_notice.hpp: tell this process's MPI library that a peer process failed.
//
// Why: ULFM learns of a failure from the runtime (a process that died on a host whose daemon is
// reachable) or from its own detector, which walks a ring and spends one timeout per silent rank.
// ftcc's heartbeat (recovery/heartbeat.hpp) finds a lost host or a hung rank faster; this turns
// its suspicion into ULFM's knowledge, so operations with the suspect fail with
// MPI_ERR_PROC_FAILED and MPIX_Comm_agree/shrink stop waiting for it.
//
// How (Open MPI 5 with ULFM): a PMIx event PMIX_ERR_PROC_ABORTED naming the peer, of range
// PMIX_RANGE_PROC_LOCAL, so only this process's handlers see it; Open MPI's default handler marks
// the peer failed in every communicator, as it does for a death the runtime reports. Each survivor
// tells its own library (the heartbeat's news reaches all of them); nothing is sent anywhere.
// PMIx_Notify_event is looked up (dlsym) in the PMIx library the MPI already loaded.
//
// Failure behaviour: notify_process_failed() returns false, and changes nothing, when this MPI
// has no PMIx (another MPI, or ftcc built without PMIx's headers) or the call fails; the caller
// then relies on ULFM's own detection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ftcc::recovery {

// A process's name in the runtime: its PMIx namespace and rank in it.
struct MpiProcessName {
  std::string nspace;
  std::uint32_t rank = 0;
};

// This process's name, from PMIX_NAMESPACE / PMIX_RANK (set by the runtime), or nullopt.
std::optional<MpiProcessName> my_mpi_process_name();

// Pre: MPI initialised; `me` is this process, `failed` a peer. Called from the heartbeat thread:
// PMIx runs Open MPI's handler on the calling thread, which hands the work to MPI's progress
// engine (an event on opal_sync_event_base), so MPI state is changed by MPI's own thread.
bool notify_process_failed(const MpiProcessName& me, const MpiProcessName& failed);

// True when notify_process_failed can work in this build and process (PMIx found).
bool can_notify_process_failed();

}  // namespace ftcc::recovery
