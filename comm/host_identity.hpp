// comm/host_identity.hpp: which processes run on "the same host", the one notion every layer uses
// (comm/'s shared memory and hierarchical collectives, recovery/'s heartbeat fencing and quorum).
//
// host_identity() = "<hostname>/<16 hex digits>", the digits a hash of the kernel's boot id and
// this process's mount, pid and network namespaces. Two processes with the same identity share a
// kernel, a /dev/shm (mount namespace), pids (so one can fence the other with a signal) and a
// network stack; the simulated hosts of tools/netns-hosts (one network and mount namespace each)
// and containers are different hosts. Stable for the life of a process; never throws (a part
// that cannot be read hashes as empty).
#pragma once

#include <string>

namespace ftcc::comm {

std::string host_identity();

}  // namespace ftcc::comm
