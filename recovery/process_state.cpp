// recovery/process_state.cpp: /proc/<pid>/stat read for a process's state and start time
// (process_state.hpp states the contract).
#include "ftcc/recovery/process_state.hpp"

#include <cerrno>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

namespace ftcc::recovery {

namespace {

enum class Stat { ok, no_such_process, unreadable };

// /proc/<pid>/stat: state (field 3) and start time (field 22). no_such_process only when the
// kernel says so (ENOENT/ESRCH); any other failure (EMFILE, hidepid's EACCES, a short read) is
// unreadable, which confirms nothing.
Stat read_stat(int pid, char& state, std::uint64_t& start) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return errno == ENOENT || errno == ESRCH ? Stat::no_such_process : Stat::unreadable;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  const bool read_error = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (read_error) return err == ESRCH ? Stat::no_such_process : Stat::unreadable;  // exited while reading
  const std::string line(buf, n);
  // Field 2 (comm) may contain spaces and parentheses: parse after the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return Stat::unreadable;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  if (!(rest >> state)) return Stat::unreadable;
  // rest is now past field 3 (state); start time is field 22.
  for (int i = 4; i < 22 && rest >> field; ++i) {
  }
  if (!(rest >> start)) return Stat::unreadable;
  return Stat::ok;
}

}  // namespace

std::uint64_t process_start_time(int pid) {
  char state = 0;
  std::uint64_t start = 0;
  return read_stat(pid, state, start) == Stat::ok ? start : 0;
}

bool process_gone(int pid, std::uint64_t start_time) {
  if (pid <= 0 || start_time == 0) return false;  // unknown identity: cannot confirm anything
  char state = 0;
  std::uint64_t start = 0;
  switch (read_stat(pid, state, start)) {
    case Stat::no_such_process: return true;
    case Stat::unreadable: return false;
    case Stat::ok: break;
  }
  return start != start_time || state == 'Z' || state == 'X';
}

bool process_stopped(int pid, std::uint64_t start_time) {
  if (pid <= 0 || start_time == 0) return false;
  char state = 0;
  std::uint64_t start = 0;
  // 'T' only: 't' is a process a debugger or a profiler holds (gdb -p, py-spy), never to be fenced.
  return read_stat(pid, state, start) == Stat::ok && start == start_time && state == 'T';
}

bool wait_process_gone(int pid, std::uint64_t start_time, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (process_gone(pid, start_time)) return true;
    if (pid <= 0 || start_time == 0 || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace ftcc::recovery
