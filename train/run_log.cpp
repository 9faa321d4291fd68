#include "ftcc/train/run_log.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ftcc/base/error.hpp"

namespace ftcc::train {

RunLog::RunLog(const TrainConfig& cfg, recovery::ResilientGroup& group, std::int64_t steps_per_epoch)
    : cfg_(cfg), group_(group) {
  // Open MPI hands ranks a pseudo-terminal even when mpirun's own stdout is a pipe, so
  // tools/ftcc-run passes what it saw as FTCC_STDOUT_TTY; isatty() is the fallback.
  const char* env = std::getenv("FTCC_STDOUT_TTY");  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  tty_ = env ? std::string(env) == "1" : isatty(STDOUT_FILENO) == 1;
  total_steps_ = cfg.steps > 0 ? cfg.steps : (cfg.epochs > 0 ? cfg.epochs : 10) * steps_per_epoch;
  every_ = cfg.log_every > 0 ? cfg.log_every : std::max<std::int64_t>(1, total_steps_ / 20);
}

RunLog::~RunLog() { end_bar(); }

void RunLog::json_line(const nlohmann::json& j) {
  if (reporter()) write_json_line(j);
}

void RunLog::write_json_line(const nlohmann::json& j) {
  if (cfg_.log_json.empty()) return;
  if (!json_.is_open()) {
    errno = 0;
    json_.open(cfg_.log_json, std::ios::app);  // a new rank 0 appends
    if (!json_.is_open()) throw_write_error("cannot open");
  }
  errno = 0;
  json_ << j.dump() << "\n";
  json_.flush();  // each line reaches the file now: a full disk is found at this line, not at exit
  if (!json_) throw_write_error("cannot append to");
}

void RunLog::throw_write_error(const char* what) const {
  const int err = errno;
  throw ftcc::IoError(std::string("--log-json '") + cfg_.log_json + "': " + what + " it: " +
                      (err != 0 ? std::strerror(err) : "write failed"));  // NOLINT(concurrency-mt-unsafe): messages only
}

void RunLog::end_bar() {
  if (bar_open_) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
    bar_open_ = false;
  }
}

void RunLog::note(const std::string& line) {
  if (!reporter()) return;
  end_bar();
  std::fprintf(stderr, "ftcc-train: %s\n", line.c_str());
}

void RunLog::step(std::int64_t step, std::int64_t epoch, double loss, double samples_per_s) {
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  json_line({{"event", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"world_size", group_.size()},
             {"samples_per_s", samples_per_s}, {"time", t}});
  if (!reporter() || cfg_.quiet) return;
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (step != total_steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 30;
    const int filled = total_steps_ > 0 ? static_cast<int>(width * std::min<std::int64_t>(step, total_steps_) / total_steps_) : 0;
    std::printf("\r[%-*s] step %lld/%lld epoch %lld loss %.5f %.0f samples/s world %d ", width,
                std::string(static_cast<size_t>(filled), '#').c_str(), static_cast<long long>(step),
                static_cast<long long>(total_steps_), static_cast<long long>(epoch), loss, samples_per_s, group_.size());
    std::fflush(stdout);
    bar_open_ = true;
  } else if (step % every_ == 0 || step == total_steps_) {
    std::printf("step %lld/%lld epoch %lld loss %.6f samples/s %.0f world %d\n", static_cast<long long>(step),
                static_cast<long long>(total_steps_), static_cast<long long>(epoch), loss, samples_per_s, group_.size());
    std::fflush(stdout);
  }
}

void RunLog::recovery(const recovery::RecoveryEvent& ev) {
  json_line(ev.to_json());
  if (!reporter()) return;
  end_bar();
  std::printf("recovery: %s\n", ev.summary().c_str());
  std::fflush(stdout);
}

void RunLog::checkpoint(std::int64_t step, const std::string& path) {
  json_line({{"event", "checkpoint"}, {"step", step}, {"path", path}});
  if (reporter() && !cfg_.quiet) {
    end_bar();
    std::fprintf(stderr, "ftcc-train: checkpoint %s\n", path.c_str());
  }
}

void RunLog::corruption_found(const nlohmann::json& event, const std::string& line, bool writes) {
  if (!writes) return;
  end_bar();
  std::fprintf(stderr, "ftcc-train: %s\n", line.c_str());
  write_json_line(event);
}

void RunLog::finish(const nlohmann::json& summary) {
  auto j = summary;
  j["event"] = "summary";
  json_line(j);
  if (!reporter()) return;
  end_bar();
  std::printf("FTCC_SUMMARY %s\n", summary.dump().c_str());
  std::fflush(stdout);
}

}  // namespace ftcc::train
