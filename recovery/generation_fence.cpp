#include "ftcc/recovery/generation_fence.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace ftcc::recovery {
namespace {

std::string list_of(const std::vector<int>& v) {
  std::string s;
  for (int r : v) s += (s.empty() ? "" : " ") + std::to_string(r);
  return s;
}

std::vector<int> sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

void warn(const std::string& what) {
  std::fprintf(stderr, "ftcc: generation fence: %s (the fence confirms nothing for this write)\n", what.c_str());
  std::fflush(stderr);
}

// An flock on dir/group.lock, released on destruction. A holder that is stopped (SIGSTOP) holds it
// until its fencer kills it, so the lock is polled up to a deadline, then given up with a warning.
class FenceLock {
 public:
  FenceLock(const std::string& dir, int how) {
    const std::string path = dir + "/group.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      warn("cannot open " + path + ": " + std::strerror(errno));  // NOLINT(concurrency-mt-unsafe): report only
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      if (::flock(fd_, how | LOCK_NB) == 0) {
        held_ = true;
        return;
      }
      if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    warn("could not lock " + path + " within 30 s");
  }
  ~FenceLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FenceLock(const FenceLock&) = delete;
  FenceLock& operator=(const FenceLock&) = delete;
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

}  // namespace

Superseded::Superseded(int rank, std::string what_it_did, std::int64_t generation, std::vector<int> job_members)
    : ftcc::Error("rank " + std::to_string(rank) + " was excluded: the job went on without it (its group is generation " +
                  std::to_string(generation) + ", ranks [" + list_of(job_members) + "]); not " + what_it_did),
      rank_(rank),
      generation_(generation),
      job_members_(std::move(job_members)) {}

GenerationFence::GenerationFence(std::string dir) : dir_(std::move(dir)) {}

GenerationFence::Record GenerationFence::read() const {
  Record rec;
  if (!enabled()) return rec;
  std::ifstream in(dir_ + "/group");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "job") {
      words >> rec.job;
    } else if (key == "generation") {
      words >> rec.generation;
    } else if (key == "members") {
      int r = 0;
      while (words >> r) rec.members.push_back(r);
    }
  }
  return rec;
}

void GenerationFence::write(const Record& rec) const {
  const std::string path = dir_ + "/group";
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "job " << rec.job << "\ngeneration " << rec.generation << "\nmembers " << list_of(rec.members) << "\n";
    out.flush();
    if (!out) {
      warn("cannot write " + tmp);
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    warn("cannot rename " + tmp + ": " + std::strerror(errno));  // NOLINT(concurrency-mt-unsafe): report only
    std::remove(tmp.c_str());
  }
}

void GenerationFence::begin(std::uint64_t job, std::vector<int> members) const {
  if (!enabled()) return;
  FenceLock lock(dir_, LOCK_EX);
  if (!lock.held()) return;
  if (read().job == job) return;  // a peer of this group wrote it first
  write(Record{job, 0, sorted(std::move(members))});
}

namespace {
bool holds(const GenerationFence::Record& rec, std::uint64_t job, int rank) {
  return rec.job == job && std::find(rec.members.begin(), rec.members.end(), rank) != rec.members.end();
}
}  // namespace

void GenerationFence::advance(std::uint64_t job, std::vector<int> to, int my_rank) const {
  if (!enabled()) return;
  to = sorted(std::move(to));
  FenceLock lock(dir_, LOCK_EX);
  if (!lock.held()) return;
  const Record now = read();
  if (now.generation < 0) {  // removed, or never written (the folder was not writable at start)
    warn("no record of the group in " + dir_ + "; starting one");
    write(Record{job, 0, to});
    return;
  }
  if (!holds(now, job, my_rank))
    throw Superseded(my_rank, "recording its group [" + list_of(to) + "]", now.generation, now.members);
  if (now.members != to) write(Record{job, now.generation + 1, to});
}

void GenerationFence::check(std::uint64_t job, int my_rank, const std::string& what) const {
  if (!enabled()) return;
  FenceLock lock(dir_, LOCK_SH);
  if (!lock.held()) return;
  const Record now = read();
  if (now.generation < 0) return;  // nothing recorded: nothing to compare with
  if (!holds(now, job, my_rank)) throw Superseded(my_rank, what, now.generation, now.members);
}

}  // namespace ftcc::recovery
