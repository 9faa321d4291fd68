#include "runtime.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <sstream>

#include "ftcc/base/env_number.hpp"
#include "ftcc/base/error.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/fault_spec.hpp"
#include "ftcc/recovery/generation_fence.hpp"
#include "ftcc/recovery/quorum_lost.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "rank_failure.hpp"

namespace ftcc::torch_backend {
namespace {

std::mutex g_start_mu;
// Never destroyed: the worker may be inside MPI when the process exits (the exit guard of
// recovery/ turns an exit without MPI_Finalize into a process failure the others recover from).
Runtime* g_runtime = nullptr;

// FTCC_HANG_TIMEOUT_S: seconds of heartbeat silence before a rank is fenced; "0" turns the
// heartbeat off. Default 30 s (recovery::GroupOptions).
std::chrono::milliseconds hang_timeout() {
  const char* v = std::getenv("FTCC_HANG_TIMEOUT_S");
  if (v && std::string(v) == "0") return std::chrono::milliseconds(0);
  const double s = ftcc::env_seconds("FTCC_HANG_TIMEOUT_S", 30, 0.1, 1e6);
  return std::chrono::milliseconds(static_cast<long long>(s * 1000));
}

// FTCC_FAULTS: comma-separated fault specs (recovery/fault_spec.hpp), for tests and drills.
std::vector<recovery::FaultSpec> faults_from_env() {
  const char* v = std::getenv("FTCC_FAULTS");
  std::vector<std::string> specs;
  std::string cur;
  for (const char* p = v ? v : ""; *p; ++p) {
    if (*p == ',') {
      if (!cur.empty()) specs.push_back(cur);
      cur.clear();
    } else if (*p != ' ') {
      cur += *p;
    }
  }
  if (!cur.empty()) specs.push_back(cur);
  return recovery::parse_fault_specs(specs);
}

void say(const std::string& line) {
  std::fprintf(stderr, "ftcc: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace

std::string rank_list(const std::vector<std::int64_t>& ranks) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) o << (i ? ", " : "") << ranks[i];
  o << "]";
  return o.str();
}

Runtime& Runtime::start(double timeout_s) {
  std::lock_guard<std::mutex> lock(g_start_mu);
  if (!g_runtime) g_runtime = new Runtime(timeout_s);
  return *g_runtime;
}

Runtime* Runtime::existing() {
  std::lock_guard<std::mutex> lock(g_start_mu);
  return g_runtime;
}

Runtime::Runtime(double timeout_s) : timeout_s_(timeout_s) {
  std::promise<void> ready;
  auto started = ready.get_future();
  worker_ = std::thread([this, &ready] {
    try {
      int initialized = 0;
      MPI_Initialized(&initialized);
      int provided = 0;
      if (!initialized) {
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      } else {
        MPI_Query_thread(&provided);
      }
      if (provided < MPI_THREAD_MULTIPLE) {
        throw ftcc::Error("the ftcc backend needs MPI_THREAD_MULTIPLE (operations run on the thread that waits for "
                          "them or on the backend's worker); this MPI gives level " + std::to_string(provided) +
                          (initialized ? " (the program called MPI_Init itself: use MPI_Init_thread with "
                                         "MPI_THREAD_MULTIPLE)" : ""));
      }
      if (!comm::has_ulfm()) {
        MPI_Finalize();
        throw ftcc::Error(
            "the ftcc backend needs an MPI with ULFM (fault tolerance), started with it: launch the program with "
            "tools/ftcc-run -n N python prog.py (tools/setup installs such an MPI)");
      }
      recovery::GroupOptions o;
      o.hang_timeout = hang_timeout();
      o.comm_timeout_s = std::getenv("FTCC_COMM_TIMEOUT_S") ? 0 : timeout_s_;
      o.faults = faults_from_env();
      group_ = std::make_unique<recovery::ResilientGroup>(MPI_COMM_WORLD, o);
      generations_.push_back({group_->members(), group_->rank()});
      ready.set_value();
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    t_running = true;  // this thread runs tasks: waiting for one from here would wait for itself
    loop();
  });
  try {
    started.get();
  } catch (...) {
    worker_.join();
    throw;
  }
}

int Runtime::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(generations_.size()) - 1;
}

GenerationInfo Runtime::info(int generation) const {
  std::lock_guard<std::mutex> lock(mu_);
  return generations_.at(static_cast<std::size_t>(generation));
}

std::optional<Failure> Runtime::failure(int generation) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(generation);
  if (it != failures_.end()) return it->second;
  // A fatal failure ends every generation from the one it hit.
  for (const auto& [g, f] : failures_)
    if (f.fatal && g <= generation) return f;
  return std::nullopt;
}

std::uint64_t Runtime::submit(int generation, const char* op, Run run, Done done) {
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    FTCC_CHECK(!stop_) << op << ": the ftcc backend has shut down (the program is ending)";
    id = ++next_id_;
    queue_.push_back(Task{generation, op, std::move(run), std::move(done), nullptr, id, std::chrono::steady_clock::now()});
  }
  cv_.notify_one();
  return id;
}

void Runtime::loop() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stop_ && queue_.empty() && in_flight_.empty() && !running_) return;
        if (running_) {  // a caller is running a task inline (help()): wait for it
          cv_.wait(lock);
          continue;
        }
        if (!queue_.empty()) {
          // A task submitted moments ago is left to its caller for kInlineGrace: a caller that
          // waits for it runs it on its own thread (help()), saving two thread switches.
          const auto age = std::chrono::steady_clock::now() - queue_.front().submitted;
          if (age < kInlineGrace) {
            cv_.wait_for(lock, kInlineGrace - age);
            continue;
          }
          t = std::move(queue_.front());
          queue_.pop_front();
          break;
        }
        if (!in_flight_.empty()) break;  // point-to-point to poll (about every 20 us)
        cv_.wait(lock);
      }
      running_ = true;
    }
    if (t.run || t.control) execute(t);
    poll_in_flight();
    const bool polling = !in_flight_.empty();
    std::unique_lock<std::mutex> lock(mu_);
    running_ = false;
    // Point-to-point still in flight: poll again in about 20 us, or as soon as work comes.
    if (polling && queue_.empty()) cv_.wait_for(lock, std::chrono::microseconds(20), [&] { return stop_ || !queue_.empty(); });
  }
}

void Runtime::help(std::uint64_t id) {
  FTCC_CHECK(!t_running) << "an ftcc operation was waited for from inside another one (a future's callback "
                            "that waits for a collective): chain it with .then() instead of waiting";
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const bool queued = std::any_of(queue_.begin(), queue_.end(), [&](const Task& t) { return t.id == id; });
    // Done, running elsewhere, or behind a control task (those stay on the worker, where MPI
    // was initialized): the caller waits on its Work.
    if (!queued || running_ || queue_.front().control) return;
    Task t = std::move(queue_.front());  // the tasks before it first: the order is the group's
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    {
      struct Release {  // running_ goes back to false however execute() ends
        Runtime* rt;
        ~Release() {
          t_running = false;
          std::lock_guard<std::mutex> l(rt->mu_);
          rt->running_ = false;
          rt->cv_.notify_all();
        }
      } release{this};
      t_running = true;
      execute(t);
    }
    lock.lock();
  }
}

thread_local bool Runtime::t_running = false;

void Runtime::execute(Task& t) {
  auto finished = [](const Done& done, std::exception_ptr e) { done(e); };
  if (t.control) {  // run_on_worker
    t.control();
    finished(t.done, nullptr);
    return;
  }
  if (ended_) {
    finished(t.done, std::make_exception_ptr(ftcc::Error(std::string(t.op) +
                                                         ": the ftcc backend has already ended the job (the program is exiting)")));
    return;
  }
  if (auto f = failure(t.generation)) {
    finished(t.done, error_for(*f));
    return;
  }
  ++ops_;
  try {
    Poll p = t.run(group_->comm());
    if (p) {
      in_flight_.push_back(InFlight{t.generation, t.op, std::move(p), std::move(t.done)});
      return;
    }
    finished(t.done, nullptr);
  } catch (const comm::FaultDetected& e) {
    on_fault(t.generation, t.op, e.what());
    finished(t.done, error_for(*failure(t.generation)));
  } catch (const comm::Timeout& e) {
    on_fatal(t.generation, std::string(e.what()) + " (a rank that neither answers nor dies: raise FTCC_COMM_TIMEOUT_S, or let the heartbeat fence it: FTCC_HANG_TIMEOUT_S)", std::nullopt);
    finished(t.done, error_for(*failure(t.generation)));
  } catch (const comm::CommError& e) {
    on_fatal(t.generation, e.what(), std::nullopt);
    finished(t.done, error_for(*failure(t.generation)));
  } catch (...) {
    finished(t.done, std::current_exception());  // bad use, found before any message: the group is intact
  }
}

void Runtime::poll_in_flight() {
  if (ended_) return;  // abandoned when the job ended (abandon_in_flight)
  for (std::size_t i = 0; i < in_flight_.size();) {
    InFlight& f = in_flight_[i];
    std::exception_ptr error;
    bool done = false;
    try {
      done = f.poll();
    } catch (const comm::FaultDetected& e) {
      const int g = f.generation;
      const char* op = f.op;
      on_fault(g, op, e.what());  // fails every operation of g still in flight, this one included
      i = 0;
      continue;
    } catch (const comm::Timeout& e) {
      on_fatal(f.generation, e.what(), std::nullopt);
      i = 0;
      continue;
    } catch (...) {
      error = std::current_exception();
      done = true;
    }
    if (!done) {
      ++i;
      continue;
    }
    Done d = std::move(f.done);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    d(error);
  }
}

void Runtime::abandon_in_flight(const std::string& why) {
  std::vector<InFlight> held;
  held.swap(in_flight_);
  for (auto& h : held) h.poll = nullptr;  // the requests go before the communicator does
  for (auto& h : held) {
    h.done(std::make_exception_ptr(ftcc::Error(std::string(h.op) + ": " + why)));
  }
}

void Runtime::fail_in_flight(int generation) {
  // Drop the requests first (they refer to the communicator recovery replaces), answer after.
  std::vector<Done> orphans;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->generation <= generation) {
      orphans.push_back(std::move(it->done));
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
  if (orphans.empty()) return;
  const auto f = failure(generation);
  for (auto& d : orphans) {
    d(f ? error_for(*f) : std::make_exception_ptr(ftcc::Error("operation abandoned")));
  }
}

void Runtime::on_fault(int generation, const char* op, const std::string& cause) {
  if (failure(generation)) return;
  // In-flight requests of this generation hold its communicator: abandon them before recovery
  // frees it; they get the failure once it is known.
  std::vector<InFlight> held;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->generation <= generation) {
      held.push_back(std::move(*it));
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& h : held) h.poll = nullptr;
  try {
    const recovery::RecoveryEvent& ev = group_->recover(step_ >= 0 ? step_ : ops_, std::string(op) + ": " + cause);
    Failure f;
    const GenerationInfo old = info(generation);
    f.failed_original = ev.failed;
    for (int orig : ev.failed) {
      auto it = std::find(old.members.begin(), old.members.end(), orig);
      if (it != old.members.end()) f.failed.push_back(it - old.members.begin());
    }
    std::sort(f.failed.begin(), f.failed.end());
    f.next_generation = generation + 1;
    std::ostringstream m;
    m << "rank(s) " << rank_list(f.failed) << " of the process group failed (" << op
      << "); the survivors agreed on them (" << old.size() << " -> " << group_->size()
      << " ranks): continue on dist.shrink_group(e.failed_ranks)";
    f.message = m.str();
    std::lock_guard<std::mutex> lock(mu_);
    generations_.push_back({group_->members(), group_->rank()});
    failures_[generation] = std::move(f);
  } catch (const recovery::JobError& e) {
    on_fatal(generation, e.line(), e.status());
  } catch (const recovery::QuorumLost& e) {
    on_fatal(generation, std::string("quorum lost: ") + e.what(), recovery::ExitStatus::quorum_lost);
  } catch (const recovery::Superseded& e) {
    on_fatal(generation, std::string("superseded: ") + e.what(), std::nullopt);
  } catch (const std::exception& e) {
    on_fatal(generation, std::string("recovery failed: ") + e.what(), std::nullopt);
  }
  const auto f = failure(generation);
  for (auto& h : held) {
    h.done(error_for(*f));
  }
}

void Runtime::on_fatal(int generation, const std::string& message, std::optional<recovery::ExitStatus> status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failures_.count(generation)) return;
    Failure f;
    f.fatal = true;
    f.message = message;
    f.job_status = status;
    failures_[generation] = std::move(f);
  }
  fail_in_flight(generation);
}

std::exception_ptr Runtime::error_for(const Failure& f) { return make_failure_error(f); }

template <class F>
void Runtime::run_on_worker(F&& f) {
  FTCC_CHECK(!t_running) << "ftcc_torch: begin_step/finish called from inside an ftcc operation's callback";
  std::promise<void> done;
  auto result = done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    Task t{-1, "control", nullptr, [](std::exception_ptr) {}, nullptr, ++next_id_, {}};
    t.control = [&] {
      try {
        f();
        done.set_value();
      } catch (...) {
        done.set_exception(std::current_exception());
      }
    };
    queue_.push_back(std::move(t));
  }
  cv_.notify_one();
  result.get();
}

void Runtime::begin_step(std::int64_t step) {
  run_on_worker([&] {
    if (ended_) return;
    step_ = step;
    group_->begin_step(step);
  });
}

int Runtime::leave_alone(const std::string& record, const std::string& why) {
  recovery::job_record::left(record);
  say(std::string("rank ") + std::to_string(group_->original_rank()) + ": " + why);
  return static_cast<int>(recovery::ExitStatus::internal);
}

void Runtime::report_job_error(recovery::ExitStatus status, const std::string& line) {
  if (!group_->reports()) return;
  say(line);
  recovery::job_record::outcome(status, line, group_->initial_size(), group_->size(), group_->new_processes_lost());
}

void Runtime::end_group() {
  abandon_in_flight("the job ended before this point-to-point operation completed");
  group_.reset();
  MPI_Finalize();
}

int Runtime::finish() {
  int status = 0;
  run_on_worker([&] {
    if (ended_) return;
    ended_ = true;
    try {
      while (!group_->all_finished(/*last=*/true)) {
      }
      // No outcome record: the program's own exit status, after MPI_Finalize, is the job's
      // (tools/ftcc-run reports mpirun's status when the survivors finalized; sys.exit(1)
      // after a clean end stays 1).
      if (group_->rank() == 0) {
        group_->check_current("finishing the job");
        const auto events = group_->events().size();
        say("the job finished on " + std::to_string(group_->size()) + " of " + std::to_string(group_->initial_size()) +
            " ranks (" + std::to_string(events) + (events == 1 ? " recovery)" : " recoveries)"));
      }
    } catch (const recovery::JobError& e) {
      status = static_cast<int>(e.status());
      report_job_error(e.status(), e.line());
    } catch (const std::exception& e) {
      // Superseded, quorum lost, a deadline: this process leaves alone, without MPI_Finalize.
      status = leave_alone(std::string("at the end of the program: ") + e.what(), e.what());
      return;
    }
    end_group();
  });
  return status;
}

int Runtime::fail(const std::string& message, bool config_error) {
  int status = static_cast<int>(recovery::ExitStatus::job_error);
  run_on_worker([&] {
    if (ended_) return;
    ended_ = true;
    // A failure the job already ended on: report it, do not raise it again.
    std::optional<Failure> fatal;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [g, f] : failures_)
        if (f.fatal) fatal = f;
    }
    if (fatal && !fatal->job_status) {  // quorum lost, superseded, a deadline: leave alone
      status = leave_alone(fatal->message, fatal->message);
      return;
    }
    try {
      if (fatal) throw recovery::JobError(*fatal->job_status, -1, -1, fatal->message, true);
      group_->fail_job(config_error ? recovery::ExitStatus::config_error : recovery::ExitStatus::job_error, message);
    } catch (const recovery::JobError& e) {
      status = static_cast<int>(e.status());
      report_job_error(e.status(), fatal ? fatal->message : e.line());
    } catch (const std::exception& e) {
      status = leave_alone(e.what(), e.what());
      return;
    }
    end_group();
  });
  return status;
}

}  // namespace ftcc::torch_backend
