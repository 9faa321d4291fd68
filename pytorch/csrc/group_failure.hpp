// pytorch/csrc/group_failure.hpp: what ended a generation of a process group, and what one
// recovery of a group did (ftcc_torch.recoveries()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ftcc/recovery/job_outcome.hpp"

namespace ftcc::torch_backend {

// Why a generation of a group ended without a transparent continuation.
struct Failure {
  bool fatal = false;                  // the job cannot go on here (quorum lost, a job error, ...)
  std::vector<std::int64_t> failed;    // failed ranks in the ended generation's numbering (sorted)
  std::vector<int> failed_original;    // the same processes, as original (world) ranks
  int next_generation = -1;            // the survivors' generation (-1 when fatal)
  std::string message;                 // one line: what happened, where, what to do
  std::optional<recovery::ExitStatus> job_status;  // set when the survivors agreed on a job error
};

// One recovery of one group, as every member of it saw it (the same on every member).
struct RecoveryRecord {
  std::string group;                   // "default" or the torch group's name
  int epoch = 0;                       // the process-wide recovery this was part of (1, 2, ...)
  std::vector<int> failed_original;    // original ranks lost
  std::vector<std::int64_t> failed;    // the same, in the group's numbering before the recovery
  int old_size = 0, new_size = 0;
  int old_rank = -1, new_rank = -1;
  bool transparent = false;            // false: the calls in flight raised RankFailure
  std::string why_not;                 // when not transparent: why
  std::int64_t lo = -1, hi = -1;       // collectives up to hi completed with the lost ranks somewhere
  int adopted = 0;                     // calls of this rank answered with another survivor's result
  int redone = 0;                      // calls of this rank run again on the survivors
  std::int64_t first_seq_without = -1; // the first collective without the lost ranks (hi + 1)
  // DDP: the first backward pass whose gradients lack the lost ranks, and whether some buckets of
  // that pass still had them (a failure between two buckets of one pass); -1 until known.
  std::int64_t first_ddp_step_without = -1;
  bool ddp_step_partial = false;
  std::string broadcast_note;          // a broadcast whose root was lost was sent by the new rank 0
  double ms = 0;                       // failure noticed -> this group reconciled
  std::string line;                    // the recovery line rank 0 prints
};

}  // namespace ftcc::torch_backend
