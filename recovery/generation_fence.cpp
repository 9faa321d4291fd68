#include "ftcc/recovery/generation_fence.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

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

bool holds(const GenerationFence::Record& rec, std::uint64_t job, int rank) {
  return rec.job == job && std::find(rec.members.begin(), rec.members.end(), rank) != rec.members.end();
}

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
  // The newest generation on disk: the largest G of the files group.<G>.
  std::int64_t newest = -1;
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const char* name = e->d_name;
      if (std::strncmp(name, "group.", 6) != 0 || name[6] == '\0') continue;
      char* end = nullptr;
      const long long g = std::strtoll(name + 6, &end, 10);
      if (*end == '\0' && g > newest) newest = g;
    }
    ::closedir(d);
  }
  if (newest < 0) return rec;
  std::ifstream in(dir_ + "/group." + std::to_string(newest));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "job") {
      words >> rec.job;
    } else if (key == "members") {
      int r = 0;
      while (words >> r) rec.members.push_back(r);
    }
  }
  rec.generation = newest;
  return rec;
}

bool GenerationFence::create(const Record& rec) const {
  const std::string path = dir_ + "/group." + std::to_string(rec.generation);
  char host[64] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string tmp = dir_ + "/.group.tmp." + host + "." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "job " << rec.job << "\nmembers " << list_of(rec.members) << "\n";
    out.flush();
    if (!out) {
      warn("cannot write " + tmp);
      std::remove(tmp.c_str());
      return true;  // nothing more to do: the fence is off for this write
    }
  }
  const bool made = ::link(tmp.c_str(), path.c_str()) == 0;
  const int err = errno;
  std::remove(tmp.c_str());
  if (!made && err != EEXIST) warn("cannot create " + path + ": " + std::strerror(err));  // NOLINT(concurrency-mt-unsafe): report only
  return made || err != EEXIST;
}

void GenerationFence::begin(std::uint64_t job, std::vector<int> members) const {
  if (!enabled()) return;
  members = sorted(std::move(members));
  for (;;) {
    const Record now = read();
    if (now.generation >= 0 && now.job == job) return;  // a peer of this group wrote it first
    if (create(Record{job, now.generation + 1, members})) return;
  }
}

void GenerationFence::advance(std::uint64_t job, std::vector<int> to, int my_rank) const {
  if (!enabled()) return;
  to = sorted(std::move(to));
  for (;;) {
    const Record now = read();
    if (now.generation < 0) {  // removed, or never written (the folder was not writable at start)
      warn("no record of the group in " + dir_ + "; starting one");
      create(Record{job, 0, to});
      return;
    }
    if (!holds(now, job, my_rank))
      throw Superseded(my_rank, "recording its group [" + list_of(to) + "]", now.generation, now.members);
    if (now.members == to) return;  // another survivor wrote it first
    if (create(Record{job, now.generation + 1, to})) return;
    // Another writer created that generation first: judged by its record on the next pass.
  }
}

void GenerationFence::check(std::uint64_t job, int my_rank, const std::string& what) const {
  if (!enabled()) return;
  const Record now = read();
  if (now.generation < 0) return;  // nothing recorded: nothing to compare with
  if (!holds(now, job, my_rank)) throw Superseded(my_rank, what, now.generation, now.members);
}

}  // namespace ftcc::recovery
