// recovery/step_loop.hpp: the recovery loop of a stateful training program, written once.
//
//   run_step_loop(g, {
//       .done = [&] { return state.step >= steps; },
//       .step = [&] { return state.step; },
//       .body = [&] { ...compute, communicate on g.comm(), apply; ++state.step; g.set_committed_step(...); },
//       .after_step = [&] { ...log the step... },
//       .finish = [&] { ...collective end-of-run work on g.comm()... },
//       .recovered = [&](const RecoveryEvent& ev) { ...report... }});
//
// Each turn: when done() is true, the survivors agree that every one of them is done
// (ResilientGroup::all_finished: false after a recovery that rolled someone back, and the loop
// goes on), then finish() runs and the loop returns; else begin_step(step()), body(), after_step().
// A comm::FaultDetected from body() or finish() (the model's own communication) makes every
// survivor call ResilientGroup::recover(step(), what) (whose hooks restore the state the loop reads)
// and the loop goes on from whatever step() then says. Any other exception leaves the loop
// (run_job turns it into a job-level error, recovery/run_job.hpp). State that a recovery rebuilds
// lives in the caller; the hooks (ResilientGroup::add_recovery_hook) are registered before the loop.
#pragma once

#include <cstdint>
#include <functional>

#include "ftcc/recovery/resilient_group.hpp"

namespace ftcc::recovery {

struct StepLoop {
  std::function<bool()> done;
  std::function<std::int64_t()> step;
  std::function<void()> body;
  std::function<void()> after_step = [] {};
  std::function<void()> finish = [] {};
  std::function<void(const RecoveryEvent&)> recovered = [](const RecoveryEvent&) {};
};

void run_step_loop(ResilientGroup& g, const StepLoop& loop);

}  // namespace ftcc::recovery
