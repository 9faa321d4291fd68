#include "ftcc/recovery/fault_injector.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string fault_file(const std::string& dir, int rank) { return dir + "/fault-" + std::to_string(rank) + ".ns"; }

}  // namespace

FaultInjector::FaultInjector(const std::vector<FaultSpec>& specs, int original_rank, std::string event_dir)
    : rank_(original_rank), event_dir_(std::move(event_dir)) {
  for (const auto& s : specs)
    if (s.rank == original_rank) (s.kind == FaultKind::bitflip || s.kind == FaultKind::slow || s.kind == FaultKind::wireflip ? driver_ : mine_).push_back(s);
  fired_.assign(mine_.size(), false);
  sends_seen_.assign(mine_.size(), 0);
}

void FaultInjector::at_step(std::int64_t step) {
  step_ = step;
  if (mine_.empty()) return;
  for (size_t i = 0; i < mine_.size(); ++i)
    if (!fired_[i] && mine_[i].step == step && mine_[i].phase == FaultPhase::step) {
      fired_[i] = true;
      fire(mine_[i]);
    }
}

void FaultInjector::spare_wait(std::int64_t wait) {
  for (size_t i = 0; i < mine_.size(); ++i)
    if (!fired_[i] && mine_[i].phase == FaultPhase::spare && mine_[i].step == wait) {
      fired_[i] = true;
      fire(mine_[i]);
    }
}

void FaultInjector::in_phase(FaultPhase phase, int protocol_step) {
  if (mine_.empty()) return;
  (void)protocol_step;
  for (size_t i = 0; i < mine_.size(); ++i) {
    if (fired_[i] || mine_[i].phase != phase || step_ < mine_[i].step) continue;
    // Inside collectives: count the phase's sends from the start of step S on and fire before
    // the N-th (send=N, default the second, so at least one message went out). A rank that sends once per collective dies
    // in the next one (in step S if it has two, else in a later step). Recovery: at once.
    const bool collective = phase == FaultPhase::allreduce || phase == FaultPhase::broadcast || phase == FaultPhase::allgather;
    if (collective && ++sends_seen_[i] < mine_[i].send) continue;
    fired_[i] = true;
    fire(mine_[i]);
  }
}

std::optional<FaultPhase> FaultInjector::phase_of_op(const char* op) {
  if (!op) return std::nullopt;
  if (std::strstr(op, "allreduce")) return FaultPhase::allreduce;
  if (std::strstr(op, "broadcast") || std::strstr(op, "bcast")) return FaultPhase::broadcast;
  if (std::strstr(op, "allgather")) return FaultPhase::allgather;
  return std::nullopt;
}

void FaultInjector::fire(FaultSpec& spec) {
  std::fprintf(stderr, "ftcc: fault injection on rank %d at step %lld (%s): %s\n", rank_,
               static_cast<long long>(step_), to_string(spec.phase), spec.text.c_str());
  std::fflush(stderr);
  if (spec.kind == FaultKind::delay) {
    std::this_thread::sleep_for(std::chrono::milliseconds(spec.delay_ms));
    return;
  }
  if (!event_dir_.empty()) {
    std::ofstream(fault_file(event_dir_, rank_)) << now_ns() << "\n";
  }
  switch (spec.kind) {
    case FaultKind::kill: std::raise(SIGKILL); break;
    case FaultKind::hang: std::raise(SIGSTOP); break;
    // atexit handlers run: see ResilientGroup's exit guard. Exiting under running threads is the fault.
    case FaultKind::exit: std::exit(3);  // NOLINT(concurrency-mt-unsafe): the injected fault is this exit
    case FaultKind::segv: {
      volatile int* null_page = nullptr;
      *null_page = 1;  // a real invalid write: the kernel delivers SIGSEGV
      std::raise(SIGSEGV);  // in case the compiler kept the write away
      break;
    }
    case FaultKind::stall:
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case FaultKind::throw_error:
      throw ftcc::Error("injected error on rank " + std::to_string(rank_) + " at step " + std::to_string(step_) + " (" +
                        spec.text + ")");
    case FaultKind::invariant:
      throw ftcc::InternalError("injected invariant failure on rank " + std::to_string(rank_) + " at step " +
                                std::to_string(step_) + " (" + spec.text + ")");
    case FaultKind::delay:
    case FaultKind::bitflip:
    case FaultKind::slow:
    case FaultKind::wireflip: break;  // never in mine_ (driver_faults())
  }
}

std::optional<std::int64_t> FaultInjector::read_fault_time_ns(const std::string& event_dir, int rank) {
  if (event_dir.empty()) return std::nullopt;
  std::ifstream in(fault_file(event_dir, rank));
  long long v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

}  // namespace ftcc::recovery
