// train/reduction_report.hpp: what the training job does about a gradient sum that
// --verify-reductions found wrong (train/gradient_reducer.hpp's ReductionCheck), and the words
// that say it. Pure: the same check gives the same outcome on every rank of the sum.
//
//   right when repeated   go on with the repeated sum (a transient fault): reported
//   wrong again, the link probe names one rank (all of its probed receives, or sends, changed)
//                         that rank is excluded like an outvoted replica (it leaves; spares or
//                         respawns may take its place) and the step is redone by the others
//   wrong again, no single rank named (no link, one link alone, or two ranks: both ends)
//                         the job stops: a job-level error (exit status 4) naming the links
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ftcc/train/gradient_reducer.hpp"

namespace ftcc::train {

struct ReductionOutcome {
  enum class Action { go_on, exclude, stop };
  Action action = Action::go_on;
  int excluded = -1;        // original rank, with exclude
  std::string line;         // the report line (and the job error's text with stop)
  std::string why;          // with exclude: the excluded rank's own line
  nlohmann::json event;     // {"event":"reduction_mismatch",...} for --log-json
};

// check.mismatch must be true. original_of[r]: the original rank of rank r of the sum's group.
ReductionOutcome judge_reduction(const ReductionCheck& check, std::int64_t step, const std::vector<int>& original_of);

}  // namespace ftcc::train
