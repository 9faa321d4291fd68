// train/step_breakdown.hpp: where one rank's training steps spend their time, phase by phase.
//
//   StepBreakdown t;
//   t.begin_step();            // at the start of a step
//   ...; t.mark(Phase::forward);   // the time since the previous mark (or begin_step) goes to forward
//   ...; t.mark(Phase::backward);  // a phase may be marked several times per step (micro-batches)
//   t.end_step();              // the step's figures are kept; a step that threw is never ended
//   t.to_json()                // {"steps": n, "forward": median ms, ..., "total": median ms}
//
// The medians skip the first ended step (it pays for first-touch page faults and lazy set-up) and
// cover the last kStepWindow steps after it (the memory stays bounded on a long run).
// Phases: data (sampler and batch gather), forward (model and loss), backward (autograd, which
// with overlap also starts bucket allreduces), exposed_comm (waiting for the reductions after
// backward, plus the step's statistics allreduce: communication that did not overlap), optimizer;
// compute (pp and tp: forward and backward together, as a pipeline or tensor-parallel step
// interleaves them with its point-to-point sends and its pairs' allreduces); snapshot (pp, tp and
// the hybrids: packing this rank's units and swapping them with its buddies after the commit, at
// each --replicate-every step); verify (the replicas' digests compared, train/replica_verifier.hpp,
// on each --verify-every step: the median shows it only when that is 1); at_rest (sealing this
// rank's state after the optimizer step and checking it before the next use, train/state_at_rest.hpp,
// --verify-at-rest). to_json() names only the phases a trainer marks: dp's five, or pp/tp's data,
// compute, exposed_comm, optimizer, snapshot, and verify and at_rest where they ran.
// Wall-clock time on a steady clock, taken on the host: on an oversubscribed machine a phase
// includes the time the rank was descheduled, and with --device cuda a phase measures what the
// host spends (launching kernels); device time shows where the host waits for the device (the
// loss read after backward, so in exposed_comm).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace ftcc::train {

enum class Phase : std::size_t { data, forward, backward, exposed_comm, optimizer, compute, snapshot, verify, at_rest };
inline constexpr std::size_t kPhases = 9;
inline constexpr std::size_t kStepWindow = 4096;
const char* phase_name(Phase p);

class StepBreakdown {
 public:
  void begin_step();
  void mark(Phase p);
  void end_step();
  std::size_t steps() const { return ended_; }
  // The step so far without its waits for other ranks (exposed_comm, verify, snapshot): this
  // rank's own time, for the straggler watch (train/straggler_watch.hpp).
  double own_ms() const;
  // {"steps": steps in the medians, "<phase>": median ms, ..., "total": median ms of whole
  // steps}; null before two steps have ended.
  nlohmann::json to_json() const;

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_;
  std::array<double, kPhases> current_{};
  std::array<bool, kPhases> marked_{};  // phases marked in any step
  std::size_t ended_ = 0;
  std::vector<std::array<double, kPhases>> window_;  // ring of the last kStepWindow steps after the first
};

}  // namespace ftcc::train
