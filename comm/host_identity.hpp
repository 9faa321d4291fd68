// comm/host_identity.hpp: which processes run on "the same host", the one notion every layer uses
// (comm/'s shared memory and hierarchical collectives, recovery/'s heartbeat fencing and quorum).
//
// host_identity() = "<hostname>/<16 hex digits>", the digits a hash of the kernel's boot id and
// this process's pid and network namespaces. Two processes with the same identity share a kernel,
// pids (so one can fence the other with a signal) and a network stack; the simulated hosts of
// tools/netns-hosts (one network namespace each) and containers are different hosts.
// shared_memory_identity() adds the mount namespace (which /dev/shm is): processes that share
// memory through POSIX shared-memory objects need both. Stable for the life of a process; never
// throws (a part that cannot be read hashes as empty).
#pragma once

#include <string>

namespace ftcc::comm {

std::string host_identity();
std::string shared_memory_identity();

}  // namespace ftcc::comm
