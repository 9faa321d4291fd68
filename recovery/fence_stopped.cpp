#include "ftcc/recovery/fence_stopped.hpp"

#include <signal.h>

#include <cstdio>
#include <string>

#include "ftcc/recovery/heartbeat.hpp"
#include "ftcc/recovery/job_outcome.hpp"
#include "ftcc/recovery/process_state.hpp"

namespace ftcc::recovery {

void fence_stopped_host_mates(const ResilientGroup& g, const std::string& what) {
  const PeerAddress& me = g.peer(g.original_rank());
  for (int r : g.pool_members()) {
    if (r == g.original_rank()) continue;
    const PeerAddress& p = g.peer(r);
    if (p.pid <= 0 || p.host_id != me.host_id || !process_stopped(p.pid, p.start_time)) continue;  // SIGSTOP, not a debugger
    ::kill(p.pid, SIGKILL);
    std::fprintf(stderr, "ftcc: rank %d (pid %d) was stopped while %s on rank %d: fenced (SIGKILL)\n", r, p.pid,
                 what.c_str(), g.original_rank());
    job_record::left_for(r, "fenced (SIGKILL) by rank " + std::to_string(g.original_rank()) + ": stopped while " + what);
  }
}

}  // namespace ftcc::recovery
