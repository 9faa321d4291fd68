// train/straggler_watch.hpp: ranks that stay alive and right but slow.
//
// Each rank measures its own time per step (the step's phases minus its waits for the others:
// exposed_comm, verify, snapshot; train/step_breakdown.hpp) and at every check (the exchange of
// replica verification, every --verify-every steps; train/training_driver.cpp) the ranks
// allgather their mean since the last check. observe() compares each rank with the median of the
// group's other ranks: a rank slower than `factor` times that at `window` consecutive checks is a
// straggler, reported once per streak (its streak ends at a check where it is not slow).
// Ranks are named by their original rank, so the counts survive a recovery's renumbering.
// evict_pays() is the rule for evicting one without a spare to replace it (dp: its rows go to the
// others, so n-1 ranks at the median's pace against n ranks at the straggler's); decide_eviction()
// the whole policy of --evict-stragglers, with the words that say it.
// In pp and tp a stage's waits for its neighbours and the shards' allreduces are exposed_comm, so
// a slow rank does not make the ranks that wait for it look slow.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ftcc::train {

class StragglerWatch {
 public:
  StragglerWatch(double factor, int window) : factor_(factor), window_(window) {}

  // own_ms[i]: the mean own ms per step of the rank with original rank members[i] since the last
  // check (< 0: it ran no step, an idle rank or a newcomer: not counted). Returns the original
  // ranks that reached `window` slow checks in a row at this check.
  std::vector<int> observe(std::span<const double> own_ms, std::span<const int> members);
  // The median of the last check's counted ranks (0 before any); the median of the others for a
  // rank, and its time over that (0 when it was not counted).
  double median_ms() const { return median_; }
  double others_ms(int original_rank) const;
  double slowdown(int original_rank) const;
  const std::map<int, double>& slowdowns() const { return slowdown_; }

 private:
  double factor_;
  int window_;
  double median_ = 0;
  std::map<int, int> streak_;       // consecutive slow checks, by original rank
  std::map<int, double> slowdown_;  // the last check's own / the others' median
  std::map<int, double> others_;    // the last check's median of the others
};

// Whether a job of n ranks whose slowest takes slow_ms per step (the others median_ms) is predicted
// faster on n - 1 ranks at the median's pace, which then share its rows: median_ms * n / (n - 1).
bool evict_pays(double slow_ms, double median_ms, int n);
double predicted_step_without(double median_ms, int n);

// Whether a straggler taking own_ms per step (the others' median median_ms) is evicted by
// --evict-stragglers, and the words for its report line ("; evicting it: ..." or "; not evicted:
// ..."). Its part must live on in another model replica (replicas >= 2); with a newcomer to take
// its place ("hot spare" or "respawned process"; empty: none) it always goes; without one only in
// dp (model == 1: one rank per replica), when evict_pays() over the `active` training ranks.
struct EvictionDecision {
  bool evict = false;
  std::string why;
};
EvictionDecision decide_eviction(double own_ms, double median_ms, int active, int replicas, int model,
                                 std::string_view newcomer);

}  // namespace ftcc::train
