// recovery/generation_fence.hpp: the job's current group, kept in the job folder, so that a process
// the job went on without can never write the job's files again.
//
// Why: fencing (recovery/heartbeat.hpp) kills a hung rank only from its own host. A rank stopped
// for hours on a host with no live rank, or one whose fencer was itself stopped, may run again
// after the others finished: it suspects everyone, "recovers" alone and would train a second copy
// and overwrite the final checkpoint and outcome. The fence makes that impossible whatever the
// timing: every group the job forms is recorded as (generation, members), and every write of the
// job's files checks the record first.
//
// Contract:
//  - begin(job, members): a group is formed (bootstrap). The record names the group's job id
//    (random per ResilientGroup), so a later group of the same processes replaces it, and a
//    process of an earlier group (another job id) is superseded.
//  - advance(job, to): when a recovery's survivors have agreed on their membership (after the
//    quorum check, and again once spares or new processes filled the group), each of them
//    records `to` (original ranks). Idempotent: the first survivor writes, the others find it.
//  - check(job): before a checkpoint, the outcome or any other write the job trusts.
//  - The rule: a process is superseded (advance and check throw Superseded, and it must not act
//    again) when the newest record names another job id, or a membership without it. A stale
//    process is one the job went on without: the survivors' record excludes it, and the job never
//    takes an excluded rank back (suspicion is final; a respawn starts new ranks). A live member
//    is in every record written since it joined (new processes are recorded by the survivors), so
//    a record that lags behind never refuses it. The two advances of a recovery are ordered by its
//    agreements, so a record never goes back.
//  - Records are immutable files group.<G> in the job folder (FTCC_JOB_DIR), G = 0, 1, 2 ...; the
//    newest is the job's. Generation G+1 is created with link(), which fails if it exists, so of
//    two writers racing from generation G exactly one wins and the other reads the winner's
//    record and is judged by it: no lock, nothing a stopped process can hold.
//  - What it relies on: the survivors record their group before the excluded process can run a
//    recovery of its own. They do it right after their quorum check; the excluded process was
//    silent for at least the hang timeout before they started, and a recovery of its own needs
//    ULFM calls that fail (Open MPI ends a process it was told had failed) or a timeout.
//  - check() before a write: the window between the check and the write's rename is
//    microseconds; a process would have to be stopped inside it and its group replaced meanwhile.
//  - Without a job folder (a plain mpirun) the fence is off. Best effort like every job record: a
//    record that cannot be written is reported on stderr and confirms nothing (a healthy job is
//    never stopped by its folder); with no record at all, nothing is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {

// This process belongs to a group the job no longer runs in: it was excluded (hung, stopped, cut
// off) and the others went on. Its only safe move is to leave without writing anything.
class Superseded : public ftcc::Error {
 public:
  Superseded(int rank, std::string what_it_did, std::int64_t generation, std::vector<int> job_members);
  int rank() const { return rank_; }
  std::int64_t generation() const { return generation_; }
  const std::vector<int>& job_members() const { return job_members_; }

 private:
  int rank_;
  std::int64_t generation_;
  std::vector<int> job_members_;
};

class GenerationFence {
 public:
  // dir "": the fence is off (advance and check do nothing).
  explicit GenerationFence(std::string dir);
  bool enabled() const { return !dir_.empty(); }
  // Member lists: original ranks, any order. advance and check throw Superseded (see above).
  void begin(std::uint64_t job, std::vector<int> members) const;
  void advance(std::uint64_t job, std::vector<int> to, int my_rank) const;
  void check(std::uint64_t job, int my_rank, const std::string& what) const;
  // The record as it is now: job id, generation (-1 when there is none) and members.
  struct Record {
    std::uint64_t job = 0;
    std::int64_t generation = -1;
    std::vector<int> members;
  };
  Record read() const;

 private:
  // Creates group.<rec.generation>; false if another writer created it first.
  bool create(const Record& rec) const;
  std::string dir_;
};

}  // namespace ftcc::recovery
