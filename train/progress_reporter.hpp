// train/progress_reporter.hpp: what every trainer (dp, pp, tp) reports after a committed step or
// a recovery, in one place: the run log's step line, the samples/s window and the Prometheus
// metrics server. The server runs on the current rank 0; after rank 0 dies the new rank 0
// starts its own on the same port (--metrics-port; 0 picks a free one and logs it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "ftcc/recovery/recovery_event.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/metrics_server.hpp"
#include "ftcc/train/run_log.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

class ProgressReporter {
 public:
  ProgressReporter(const TrainConfig& cfg, recovery::ResilientGroup& group, RunLog& log);

  // Samples consumed by the step being committed (counted into samples/s).
  void add_samples(std::int64_t n) {
    window_samples_ += n;
    if (steps_done_ > 0) steady_samples_ += n;
  }
  void step_done(std::int64_t step, std::int64_t epoch, double loss, std::int64_t samples_seen);
  void recovered(const recovery::RecoveryEvent& ev);
  // A replica verification found a mismatch and `excluded` ranks were outvoted (every rank counts
  // it, so a new rank 0's metrics hold the whole run's).
  // A straggler found (evicted: it leaves), and every rank's own time over the median's at the last check.
  void straggler_found() { ++metrics_.stragglers_reported_total; }
  void straggler_evicted() { ++metrics_.stragglers_evicted_total; }
  void slowdowns(const std::map<int, double>& by_rank) { metrics_.slowdown = by_rank; }
  void state_at_rest_mismatch(std::int64_t ranks) { metrics_.state_at_rest_mismatches_total += ranks; }
  void reduction_mismatch() { ++metrics_.reduction_mismatches_total; }  // counted by the ranks of the sum
  void replica_mismatch(std::int64_t excluded) {
    ++metrics_.replica_mismatches_total;
    metrics_.corrupt_ranks_excluded_total += excluded;
  }
  // Steady-state step throughput: samples of the steps after the first, over the time from the
  // end of the first step to the end of the last (no set-up, initialization, first-step warm-up
  // or final evaluation; recoveries on the way count). 0 with fewer than two steps.
  double steady_samples_per_s() const;

 private:
  void serve_if_rank0();

  const TrainConfig& cfg_;
  recovery::ResilientGroup& group_;
  RunLog& log_;
  std::unique_ptr<MetricsServer> server_;
  TrainingMetrics metrics_;
  std::int64_t window_samples_ = 0;
  std::chrono::steady_clock::time_point window_start_ = std::chrono::steady_clock::now();
  std::int64_t steps_done_ = 0, steady_samples_ = 0;
  std::chrono::steady_clock::time_point first_done_, last_done_;
};

}  // namespace ftcc::train
