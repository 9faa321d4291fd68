// train/run_log.hpp: what a training run tells its user, written by the current rank 0 only
// (the lowest surviving rank takes over when rank 0 dies).
//
//  - stdout a TTY: a progress bar (step, epoch, loss, samples/s, world size), redrawn at most
//    10 times a second; otherwise one plain line every log_every steps;
//  - one line per recovery (who failed, how long it took) and per checkpoint, on stderr;
//  - --log-json PATH: one JSON object per line: {"event":"step",...} for every step,
//    {"event":"recovery",...}, {"event":"checkpoint",...}, {"event":"replica_mismatch",...},
//    {"event":"state_at_rest",...},
//    {"event":"summary",...};
//  - at the end exactly one stdout line "FTCC_SUMMARY {json}".
// A --log-json that cannot be written throws ftcc::IoError (a job error, exit 4).
// --quiet keeps only the recovery lines and the summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ftcc/recovery/recovery_event.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

class RunLog {
 public:
  RunLog(const TrainConfig& cfg, recovery::ResilientGroup& group, std::int64_t steps_per_epoch);
  ~RunLog();

  void note(const std::string& line);
  void step(std::int64_t step, std::int64_t epoch, double loss, double samples_per_s);
  void recovery(const recovery::RecoveryEvent& ev);
  void checkpoint(std::int64_t step, const std::string& path);
  // Silent data corruption found (a replica verification's mismatch, train/replica_verifier.hpp, or
  // state changed at rest, train/state_at_rest.hpp): `line` on stderr and `event` in --log-json,
  // written by the rank the caller names (`writes`: the lowest rank that stays, as rank 0 may be
  // the one outvoted).
  void corruption_found(const nlohmann::json& event, const std::string& line, bool writes);
  // Another event for --log-json ({"event":"straggler",...}), from rank 0.
  void event(const nlohmann::json& event) { json_line(event); }
  void finish(const nlohmann::json& summary);

 private:
  bool reporter() const { return group_.rank() == 0; }
  // Appends j to --log-json and flushes; throws ftcc::IoError naming the file and the reason when
  // that fails (a full disk is a job error, found at the line that did not fit).
  void json_line(const nlohmann::json& j);
  void write_json_line(const nlohmann::json& j);  // json_line without its rank-0 check
  [[noreturn]] void throw_write_error(const char* what) const;
  void end_bar();

  const TrainConfig& cfg_;
  recovery::ResilientGroup& group_;
  std::int64_t total_steps_;
  std::int64_t every_;
  bool tty_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::ofstream json_;
};

}  // namespace ftcc::train
