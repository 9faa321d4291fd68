// recovery/fence_stopped.hpp: what a rank does with stopped host-mates when it leaves at a
// deadline.
//
// A collective, or a ULFM call (recovery/call_deadline.hpp), passed its deadline and this rank is
// leaving alone (ftcc-train and run_job, the torch backend): a process of this host that is
// stopped (SIGSTOP, state T; not one a debugger traces) is why no peer answered. With the heartbeat off (hang timeout 0) nothing else would ever
// fence it, and the job would wait for it forever (tools/ftcc-run waits for every process). So it
// is SIGKILLed, with one line on stderr and a `left` record in the job folder naming who fenced it
// and why ("stopped while " + `what`: "a collective timed out"), so that it cannot wake up later
// and go on alone. Processes of other hosts and running ones are left alone. Never throws.
#pragma once

#include <string>

#include "ftcc/recovery/resilient_group.hpp"

namespace ftcc::recovery {

void fence_stopped_host_mates(const ResilientGroup& g, const std::string& what);

}  // namespace ftcc::recovery
