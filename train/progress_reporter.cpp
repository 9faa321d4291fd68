#include "ftcc/train/progress_reporter.hpp"

#include <string>

namespace ftcc::train {

ProgressReporter::ProgressReporter(const TrainConfig& cfg, recovery::ResilientGroup& group, RunLog& log)
    : cfg_(cfg), group_(group), log_(log) {
  serve_if_rank0();
}

void ProgressReporter::serve_if_rank0() {
  if (cfg_.metrics_port < 0 || group_.rank() != 0 || server_) return;
  server_ = std::make_unique<MetricsServer>(cfg_.metrics_bind, static_cast<std::uint16_t>(cfg_.metrics_port));
  log_.note("metrics on http://" + cfg_.metrics_bind + ":" + std::to_string(server_->port()) + "/metrics");
}

void ProgressReporter::step_done(std::int64_t step, std::int64_t epoch, double loss, std::int64_t samples_seen) {
  const auto now = std::chrono::steady_clock::now();
  if (steps_done_++ == 0) first_done_ = now;
  last_done_ = now;
  const double window_s = std::chrono::duration<double>(now - window_start_).count();
  const double sps = window_s > 0 ? static_cast<double>(window_samples_) / window_s : 0;
  log_.step(step, epoch, loss, sps);
  if (window_s > 1.0) {  // a sliding window of about a second
    window_samples_ = 0;
    window_start_ = now;
  }
  if (server_) {
    metrics_.step = step;
    metrics_.loss = loss;
    metrics_.world_size = group_.size();
    metrics_.spares_waiting = group_.spares_left();
    metrics_.samples_per_s = sps;
    metrics_.samples_seen = samples_seen;
    server_->update(metrics_);
  }
}

double ProgressReporter::steady_samples_per_s() const {
  const double s = std::chrono::duration<double>(last_done_ - first_done_).count();
  return steps_done_ > 1 && s > 0 ? static_cast<double>(steady_samples_) / s : 0;
}

void ProgressReporter::recovered(const recovery::RecoveryEvent& ev) {
  log_.recovery(ev);
  metrics_.recoveries_total = static_cast<std::int64_t>(group_.events().size());
  metrics_.last_recovery_ms = ev.total_ms;
  metrics_.spares_waiting = group_.spares_left();
  metrics_.spares_joined_total += static_cast<std::int64_t>(ev.joined.size());
  metrics_.last_state_transfer_bytes = ev.transfer_bytes;
  serve_if_rank0();
}

}  // namespace ftcc::train
