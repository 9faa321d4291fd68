// train/metrics_server.hpp: Prometheus text-format metrics over HTTP (Boost.Beast), read-only.
//
//   GET /metrics  -> 200, text/plain; version=0.0.4, the current values
//   other paths   -> 404; other methods -> 405; anything unparsable -> 400 (connection closed)
// Runs on its own thread with its own io_context; one request per connection, bounded request
// size (8 KiB), a 5 s deadline, at most 16 connections open (a new one closes the oldest) and a
// 100 ms pause after a failed accept (out of descriptors), so a slow or hostile client cannot
// stall the job, spin a core or take the descriptors a checkpoint needs. Binds to 127.0.0.1 unless told otherwise. Port 0 picks a free port (see port()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace ftcc::train {

struct TrainingMetrics {
  std::int64_t step = 0;
  double loss = 0;
  int world_size = 0;
  std::int64_t recoveries_total = 0;
  double last_recovery_ms = 0;
  double samples_per_s = 0;
  std::int64_t samples_seen = 0;
  int spares_waiting = 0;              // hot spares not yet in the training group
  std::int64_t spares_joined_total = 0;
  std::int64_t last_state_transfer_bytes = 0;
  std::int64_t replica_mismatches_total = 0;       // replica verifications that found a mismatch
  std::int64_t state_at_rest_mismatches_total = 0;  // ranks whose state changed at rest (train/state_at_rest.hpp)
  std::int64_t reduction_mismatches_total = 0;      // gradient sums found wrong (--verify-reductions)
  std::int64_t corrupt_ranks_excluded_total = 0;   // ranks outvoted by their replicas and excluded
  std::int64_t stragglers_reported_total = 0;
  std::int64_t stragglers_evicted_total = 0;
  std::map<int, double> slowdown;                  // original rank -> own time / the median's, last check
};

// The Prometheus exposition text for m (all series prefixed ftcc_).
std::string prometheus_text(const TrainingMetrics& m);

class MetricsServer {
 public:
  MetricsServer(const std::string& bind_address, std::uint16_t port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  std::uint16_t port() const;
  void update(const TrainingMetrics& m);
  std::uint64_t requests_served() const;
  std::uint64_t bad_requests() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftcc::train
