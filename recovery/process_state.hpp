// recovery/process_state.hpp: what the kernel says of a process of this host named by its pid and
// its start time (/proc/<pid>/stat): alive, stopped by a signal, or gone. The pair, not the pid
// alone, names a process: a pid is reused, a start time is not.
//
// Used where a rank may only act on a confirmed fact: the heartbeat fencing a stopped host-mate,
// a recovery's quorum rule counting a lost rank as dead, the hang-timeout fence. An answer that
// cannot be read (EMFILE, hidepid's EACCES, a short read) confirms nothing: every function then
// says "not gone" / "not stopped". No exceptions.
#pragma once

#include <chrono>
#include <cstdint>

namespace ftcc::recovery {

// Start time of a live process (/proc/<pid>/stat field 22, clock ticks since boot), 0 if unknown.
std::uint64_t process_start_time(int pid);
// True when the process recorded as (pid, start_time) on this host is dead: the kernel says there
// is no such pid, another process has it, or it is a zombie. False when alive (stopped included),
// when /proc cannot be read, or for an unknown identity (pid <= 0 or start_time 0).
bool process_gone(int pid, std::uint64_t start_time);
// True when that process is alive and stopped by a signal (SIGSTOP: state T; not a debugger's t).
bool process_stopped(int pid, std::uint64_t start_time);
// process_gone, asked again every few milliseconds until it says yes or `deadline` passes: a
// process just sent SIGKILL (a fenced rank, SIGSTOPped or not) dies a moment later, not at once.
bool wait_process_gone(int pid, std::uint64_t start_time, std::chrono::steady_clock::time_point deadline);

}  // namespace ftcc::recovery
