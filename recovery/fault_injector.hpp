// recovery/fault_injector.hpp: makes this process misbehave on purpose (kill, hang, delay, exit)
// at the step and phase a FaultSpec names. Off by default and free when off: with no spec for
// this rank every call is one branch on an empty vector.
//
// Before acting, the injector writes the wall-clock time of the fault (CLOCK_REALTIME, ns) to
// EVENT_DIR/fault-<rank>.ns so survivors can compute detect_ms (same-host clocks; on several
// hosts the figure is only as good as their clock sync). Each spec fires once.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ftcc/recovery/fault_spec.hpp"

namespace ftcc::recovery {

class FaultInjector {
 public:
  FaultInjector() = default;
  // Keeps the specs whose rank is `original_rank` (the job's original numbering).
  FaultInjector(const std::vector<FaultSpec>& specs, int original_rank, std::string event_dir = {});

  bool enabled() const { return !mine_.empty(); }
  // This rank's bitflip and slow specs, which the training driver injects (the injector only acts
  // on processes).
  const std::vector<FaultSpec>& driver_faults() const { return driver_; }

  // Start of step `step`: fires phase=step specs for it; remembers the step for in_phase().
  void at_step(std::int64_t step);
  // Inside a collective (comm's fault hook, called before each send) or the recovery protocol.
  // A collective-phase spec counts the sends of its phase from the start of its step on and
  // fires before the second, so part of the messages went out: within step S when the rank
  // sends twice or more in it, else in the next collective of that phase (a tree leaf that
  // sends once per allreduce). A recovery-phase spec fires at the first call in step S or later.
  void in_phase(FaultPhase phase, int protocol_step);
  // A hot spare, which runs no steps: the step of a recovery it takes part in (so recovery-phase
  // specs can fire on it), and the start of its `wait`-th wait (phase=spare specs with step = wait).
  void observe_step(std::int64_t step) { step_ = std::max(step_, step); }
  void spare_wait(std::int64_t wait);
  // Maps a comm hook's op name ("ring_allreduce", "tree_broadcast", ...) to a phase.
  static std::optional<FaultPhase> phase_of_op(const char* op);

  // Time of a fault written by `rank`'s injector into event_dir, in ns since the epoch.
  static std::optional<std::int64_t> read_fault_time_ns(const std::string& event_dir, int rank);

 private:
  void fire(FaultSpec& spec);

  std::vector<FaultSpec> mine_;
  std::vector<FaultSpec> driver_;
  std::vector<bool> fired_;
  int rank_ = -1;
  std::string event_dir_;
  std::int64_t step_ = -1;
  std::vector<int> sends_seen_;  // per spec: its phase's sends since its step began
};

}  // namespace ftcc::recovery
