#include "ftcc/recovery/job_outcome.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ftcc::recovery {

const char* to_string(ExitStatus s) {
  switch (s) {
    case ExitStatus::finished: return "finished";
    case ExitStatus::internal: return "internal error";
    case ExitStatus::config_error: return "configuration error";
    case ExitStatus::quorum_lost: return "quorum lost";
    case ExitStatus::job_error: return "job error";
    case ExitStatus::all_ranks_lost: return "every rank lost";
    case ExitStatus::crashed: return "crashed";
    case ExitStatus::not_started: return "group never formed";
  }
  return "?";
}

JobError::JobError(ExitStatus status, int rank, std::int64_t step, std::string message, bool agreed)
    : ftcc::Error(message), status_(status), rank_(rank), step_(step), message_(std::move(message)), agreed_(agreed) {}

std::string JobError::line() const {
  std::string s = to_string(status_);
  s += " on rank " + std::to_string(rank_);
  if (step_ >= 0) s += " at step " + std::to_string(step_);
  return s + ": " + message_;
}

namespace job_record {
namespace {

int g_rank = -1;
// Paths built before any signal can arrive: the crash handler only uses async-signal-safe calls.
char g_crash_path[4096];

std::string path_of(const std::string& name) { return dir() + "/" + name; }

// Write `text` to dir/name through a temporary file and rename(), so a reader sees all or nothing.
// `once`: never replace an existing dir/name (link() instead of rename(): it fails if one exists).
void write_atomically(const std::string& name, const std::string& text, bool once = false) {
  if (dir().empty()) return;
  const std::string final_path = path_of(name);
  // Unique per write, across the hosts of a shared folder and the threads of a process (nothing
  // cached: this also runs in the exit guard, after thread-local objects are gone).
  static std::atomic<unsigned> writes{0};
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  const std::string tmp = final_path + ".tmp." + host + "." + std::to_string(getpid()) + "." + std::to_string(writes++);
  // A new file, never one found at that name (O_EXCL), and never through a symlink planted there
  // (O_NOFOLLOW): what is written lands in this job's folder only.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  FILE* f = fd >= 0 ? ::fdopen(fd, "w") : nullptr;
  if (fd >= 0 && !f) ::close(fd);
  bool ok = f && std::fputs(text.c_str(), f) >= 0;
  if (f) ok = std::fclose(f) == 0 && ok;
  if (ok && once) {
    ok = ::link(tmp.c_str(), final_path.c_str()) == 0;
    const int err = errno;
    std::remove(tmp.c_str());
    if (!ok && err == EEXIST) {
      std::fprintf(stderr, "ftcc: the job record %s was already written; keeping the first one\n", final_path.c_str());
      return;
    }
    errno = err;
  } else if (ok) {
    ok = std::rename(tmp.c_str(), final_path.c_str()) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "ftcc: could not write the job record %s: %s\n", final_path.c_str(),
                 std::strerror(errno));  // NOLINT(concurrency-mt-unsafe): stderr report only
    std::remove(tmp.c_str());
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[std::size(kCrashSignals)];

size_t put(char* buf, size_t at, size_t cap, const char* s) {
  while (*s && at + 1 < cap) buf[at++] = *s++;
  return at;
}

size_t put_int(char* buf, size_t at, size_t cap, long v) {
  char digits[24];
  int n = 0;
  bool neg = v < 0;
  unsigned long u = neg ? static_cast<unsigned long>(-v) : static_cast<unsigned long>(v);
  do digits[n++] = static_cast<char>('0' + u % 10); while ((u /= 10) && n < 23);
  if (neg && at + 1 < cap) buf[at++] = '-';
  while (n > 0 && at + 1 < cap) buf[at++] = digits[--n];
  return at;
}

// Records the crash, tells stderr, then hands the signal to whoever handled it before (the
// default action, or a sanitizer's report) so the process still dies of it.
void on_crash(int sig) {
  char line[160];
  size_t n = put(line, 0, sizeof line, "ftcc: rank ");
  n = put_int(line, n, sizeof line, g_rank);
  n = put(line, n, sizeof line, " crashed: ");
  n = put(line, n, sizeof line, signal_name(sig));
  n = put(line, n, sizeof line, "\n");
  if (write(STDERR_FILENO, line, n) < 0) { /* nothing more to do in a signal handler */ }
  if (g_crash_path[0]) {
    const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      char rec[64];
      size_t m = put(rec, 0, sizeof rec, signal_name(sig));
      m = put(rec, m, sizeof rec, " ");
      m = put_int(rec, m, sizeof rec, sig);
      m = put(rec, m, sizeof rec, "\n");
      if (write(fd, rec, m) < 0) { /* best effort */ }
      close(fd);
    }
  }
  for (size_t i = 0; i < std::size(kCrashSignals); ++i)
    if (kCrashSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
  raise(sig);
}

void install_crash_handler() {
  // Its own stack, so a stack overflow can still be recorded.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  for (size_t i = 0; i < std::size(kCrashSignals); ++i) {
    struct sigaction sa {};
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK;
    sigaction(kCrashSignals[i], &sa, &g_previous[i]);
  }
}

}  // namespace

const std::string& dir() {
  // Never destroyed: the exit handlers that write records run after static destructors.
  static const std::string* d = [] {
    const char* v = std::getenv("FTCC_JOB_DIR");  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
    return new std::string(v ? v : "");  // NOLINT(cppcoreguidelines-owning-memory): intentionally leaked
  }();
  return *d;
}

void joining(int original_rank) {
  if (g_rank >= 0) return;
  g_rank = original_rank;
  if (dir().empty()) return;
  const std::string crash = path_of("rank-" + std::to_string(original_rank) + ".crashed");
  if (crash.size() < sizeof g_crash_path) std::memcpy(g_crash_path, crash.c_str(), crash.size() + 1);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  write_atomically("rank-" + std::to_string(original_rank) + ".joining",
                   "pid " + std::to_string(getpid()) + " host " + host + "\n");
  install_crash_handler();
}

void formed(int processes) { write_atomically("formed", "processes " + std::to_string(processes) + "\n"); }

void started(int original_rank) {
  static bool written = false;
  if (written) return;
  written = true;
  joining(original_rank);
  if (dir().empty()) return;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  write_atomically("rank-" + std::to_string(original_rank) + ".started",
                   "pid " + std::to_string(getpid()) + " host " + host + "\n");
}

void outcome(ExitStatus status, const std::string& line, int world_initial, int world_final, int new_lost) {
  write_atomically("outcome", "status " + std::to_string(static_cast<int>(status)) + "\nworld " +
                                  std::to_string(world_initial) + " " + std::to_string(world_final) + "\nline " +
                                  line + "\nnew_lost " + std::to_string(new_lost) + "\n",
                   /*once=*/true);
}

void finished(const std::string& line) { write_atomically("finished", "line " + line + "\n", /*once=*/true); }

void quorum_lost(int original_rank, const std::string& line) {
  write_atomically("rank-" + std::to_string(original_rank) + ".quorum", line + "\n");
}

void exited(int status) {
  if (g_rank < 0) return;
  write_atomically("rank-" + std::to_string(g_rank) + ".exited", "status " + std::to_string(status) + "\n");
}

void refused(int original_rank, int status) {
  joining(original_rank);
  exited(status);
}

void left_for(int rank, const std::string& how) {
  // The first record says why (as in left()).
  if (::access(path_of("rank-" + std::to_string(rank) + ".left").c_str(), F_OK) == 0) return;
  write_atomically("rank-" + std::to_string(rank) + ".left", how + "\n");
}

void left(const std::string& how) {
  if (g_rank < 0) return;
  // The first record says why; a later one (the exit guard's "exited without MPI_Finalize") is
  // only its consequence.
  if (!dir().empty() && ::access(path_of("rank-" + std::to_string(g_rank) + ".left").c_str(), F_OK) == 0) return;
  write_atomically("rank-" + std::to_string(g_rank) + ".left", how + "\n");
}

}  // namespace job_record
}  // namespace ftcc::recovery
