#include "runtime.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <set>
#include <sstream>

#include "ftcc/base/env_number.hpp"
#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/fault_spec.hpp"
#include "ftcc/recovery/generation_fence.hpp"
#include "ftcc/recovery/group_environment.hpp"
#include "ftcc/recovery/quorum_lost.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "rank_failure.hpp"

namespace ftcc::torch_backend {
namespace {

std::mutex g_start_mu;
// Never destroyed: a thread may be inside MPI when the process exits (the exit guard of recovery/
// turns an exit without MPI_Finalize into a process failure the others recover from).
Runtime* g_runtime = nullptr;
thread_local bool t_on_sentinel = false;

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

// A tag for MPI_Comm_create_group that every member derives from the group's name.
int create_tag(const std::string& name) {
  std::uint32_t h = 2166136261u;
  for (unsigned char ch : name) h = (h ^ ch) * 16777619u;
  return static_cast<int>(h % 30000u) + 1;
}

}  // namespace

std::string rank_list(const std::vector<std::int64_t>& ranks) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) o << (i ? ", " : "") << ranks[i];
  o << "]";
  return o.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  return rank_list(std::vector<std::int64_t>(ranks.begin(), ranks.end()));
}

void Runtime::say(const std::string& line) {
  std::fprintf(stderr, "ftcc: %s\n", line.c_str());
  std::fflush(stderr);
}

std::string Runtime::settings_error() {
  try {
    hang_timeout();
    faults_from_env();
    if (std::getenv("FTCC_COMM_TIMEOUT_S")) comm::default_timeout_s();
    comm::check_shm_backing_setting();
    recovery::GroupEnvironment::read();
  } catch (const ftcc::Error& e) {
    // One line: a fault spec's error adds the grammar on lines of their own.
    const std::string what = e.what();
    const auto nl = what.find('\n');
    return nl == std::string::npos ? what : what.substr(0, nl) + " (the grammar: recovery/fault_spec.hpp)";
  }
  return {};
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
  sentinel_ = std::thread([this, &ready] {
    t_on_sentinel = true;
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
        throw ftcc::Error("the ftcc backend needs MPI_THREAD_MULTIPLE (each process group's operations run on a "
                          "thread of their own); this MPI gives level " + std::to_string(provided) +
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
      universe_ = std::make_unique<recovery::ResilientGroup>(MPI_COMM_WORLD, o);
      original_rank_ = universe_->original_rank();
      MPI_Comm_size(MPI_COMM_WORLD, &job_size_);
      world_ = std::make_shared<GroupRunner>(*this, "default", universe_->members(), &universe_->comm(), nullptr,
                                             true);
      ready.set_value();
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    sentinel_loop();
  });
  try {
    started.get();
  } catch (...) {
    sentinel_.join();
    throw;
  }
}

int Runtime::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

std::vector<int> Runtime::universe_members() const {
  std::vector<int> m;
  const_cast<Runtime*>(this)->on_sentinel([&] { m = universe_->members(); });
  return m;
}

std::vector<RecoveryRecord> Runtime::recoveries() const {
  std::vector<RecoveryRecord> all = world_->recoveries();
  std::vector<std::weak_ptr<GroupRunner>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    groups = groups_;
  }
  for (auto& w : groups)
    if (auto g = w.lock()) {
      auto r = g->recoveries();
      all.insert(all.end(), r.begin(), r.end());
    }
  std::stable_sort(all.begin(), all.end(), [](const RecoveryRecord& a, const RecoveryRecord& b) { return a.epoch < b.epoch; });
  return all;
}

// ---- the sentinel -----------------------------------------------------------------------------

template <class F>
void Runtime::on_sentinel(F&& f) {
  if (t_on_sentinel) {
    f();
    return;
  }
  std::promise<void> done;
  auto result = done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    controls_.push_back([&] {
      try {
        f();
        done.set_value();
      } catch (...) {
        done.set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_all();
  result.get();
}

void Runtime::run_on_sentinel(const std::function<void()>& f) { on_sentinel(f); }

void Runtime::sentinel_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!controls_.empty()) {
      auto f = std::move(controls_.front());
      controls_.pop_front();
      lock.unlock();
      f();
      lock.lock();
      continue;
    }
    if (stop_) break;
    if (recovery_requested_ && !fatal_ && !ended_) {
      lock.unlock();
      recover_all();
      lock.lock();
      continue;
    }
    if (ended_ || fatal_) {
      cv_.wait(lock);
      continue;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(2));
    if (!controls_.empty() || recovery_requested_ || stop_) continue;
    lock.unlock();
    watch_universe();
    lock.lock();
  }
}

void Runtime::watch_universe() {
  // A receive nothing ever sends: ULFM completes it with an error when a process of the universe
  // fails or someone revokes it, which is how a process with nothing to do learns of a failure.
  MPI_Comm c = universe_->comm().raw();
  auto* req = static_cast<MPI_Request*>(watch_request_);
  if (!req) {
    req = new MPI_Request(MPI_REQUEST_NULL);
    if (MPI_Irecv(nullptr, 0, MPI_BYTE, MPI_ANY_SOURCE, universe_->comm().liveness_tag(), c, req) != MPI_SUCCESS) {
      delete req;
      request_recovery("the universe: a receive could not be posted");
      return;
    }
    watch_request_ = req;
  }
  int flag = 0;
  MPI_Status st;
  const int rc = MPI_Test(req, &flag, &st);
  if (rc != MPI_SUCCESS || flag) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    cancel_watch();
    request_recovery(std::string("the job: ") + (cls == comm::revoked_error_class() ? "revoked by another rank" : "a process failed"));
  }
}

void Runtime::cancel_watch() {
  auto* req = static_cast<MPI_Request*>(watch_request_);
  if (!req) return;
  if (*req != MPI_REQUEST_NULL) {
    MPI_Cancel(req);
    MPI_Request_free(req);
  }
  delete req;
  watch_request_ = nullptr;
}

void Runtime::request_recovery(const std::string& cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!recovery_requested_) {
      recovery_requested_ = true;
      cause_ = cause;
      noticed_ = std::chrono::steady_clock::now();
    }
  }
  cv_.notify_all();
}

void Runtime::recover_all() {
  std::string cause;
  std::chrono::steady_clock::time_point noticed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cause = cause_;
    noticed = noticed_ == std::chrono::steady_clock::time_point{} ? std::chrono::steady_clock::now() : noticed_;
  }
  cancel_watch();
  // 1. Everyone on the universe stops what it does there; the default group lets go of it.
  try {
    comm::revoke(universe_->comm().raw());
  } catch (...) {
  }
  world_->pause(false);
  // 2. The one agreement on who failed.
  const recovery::RecoveryEvent* ev = nullptr;
  try {
    ev = &universe_->recover(step_, cause);
  } catch (const recovery::JobError& e) {
    Failure f;
    f.fatal = true;
    f.message = e.line();
    f.job_status = e.status();
    fail_everything(f);
    return;
  } catch (const recovery::QuorumLost& e) {
    Failure f;
    f.fatal = true;
    f.message = std::string("quorum lost: ") + e.what();
    f.job_status = recovery::ExitStatus::quorum_lost;
    fail_everything(f);
    return;
  } catch (const std::exception& e) {
    Failure f;
    f.fatal = true;
    f.message = std::string("recovery failed: ") + e.what();
    fail_everything(f);
    return;
  }
  int epoch = 0;
  std::vector<std::weak_ptr<GroupRunner>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch = ++epoch_;
    recovery_requested_ = false;  // failures noticed from here on are the next recovery's
    noticed_ = {};
    groups = groups_;
  }
  const std::vector<int> alive = universe_->members();
  auto survivors_of = [&](const std::vector<int>& members) {
    std::vector<int> s;
    for (int m : members)
      if (std::find(alive.begin(), alive.end(), m) != alive.end()) s.push_back(m);
    return s;
  };
  world_->resume(GroupRunner::Resume{epoch, &universe_->comm(), nullptr, ev->failed, alive, noticed});
  // 3. Every sub-group that lost a member, in creation order (the same on every member).
  for (auto& w : groups) {
    auto g = w.lock();
    if (!g) continue;
    if (g->stopped()) continue;  // replaced by a reconfigure, or aborted: nothing to rebuild
    const std::vector<int> members = g->members();
    const std::vector<int> survivors = survivors_of(members);
    if (survivors.size() == members.size() && !g->paused()) continue;  // untouched: it keeps running
    g->pause(true);
    if (!g->rebuildable()) {
      // A group made by reconfigure: its program decides who the members are (it reconfigures
      // with the survivors' handles); until then every call raises RankFailure.
      Failure f;
      for (std::size_t i = 0; i < members.size(); ++i)
        if (std::find(alive.begin(), alive.end(), members[i]) == alive.end()) {
          f.failed.push_back(static_cast<std::int64_t>(i));
          f.failed_original.push_back(members[i]);
        }
      f.message = "ranks " + rank_list(f.failed) + " of the process group '" + g->name() +
                  "' failed: reconfigure it with the survivors' handles and a fresh uuid";
      g->fail_all(f);
      continue;
    }
    try {
      std::unique_ptr<comm::Communicator> c = make_communicator(survivors, g->name());
      g->resume(GroupRunner::Resume{epoch, nullptr, std::move(c), ev->failed, survivors, noticed});
    } catch (const comm::FaultDetected& e) {
      request_recovery(g->name() + ": forming the survivors' group: " + e.what());
      return;  // the groups not resumed yet stay paused until the next recovery
    }
  }
}

std::unique_ptr<comm::Communicator> Runtime::make_communicator(const std::vector<int>& members, const std::string& name) {
  const std::vector<int> alive = universe_->members();
  std::vector<int> ranks;
  for (int m : members) {
    auto it = std::find(alive.begin(), alive.end(), m);
    FTCC_CHECK(it != alive.end()) << "process group '" << name << "': rank " << m << " of the job has failed";
    ranks.push_back(static_cast<int>(it - alive.begin()));
  }
  MPI_Comm u = universe_->comm().raw();
  MPI_Group all = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
  MPI_Comm_group(u, &all);
  MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &sub);
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Comm_create_group(u, sub, create_tag(name), &c);
  MPI_Group_free(&sub);
  MPI_Group_free(&all);
  if (rc != MPI_SUCCESS) comm::throw_mpi_error(rc, u, "MPI_Comm_create_group", __FILE__, __LINE__);
  comm::CommOptions o;
  o.timeout_s = universe_->comm().timeout_s();
  return std::make_unique<comm::Communicator>(c, comm::Communicator::Ownership::take, o);
}

std::shared_ptr<GroupRunner> Runtime::create_group(const std::string& name, const std::vector<int>& members) {
  std::shared_ptr<GroupRunner> g;
  on_sentinel([&] {
    std::unique_ptr<comm::Communicator> c = make_communicator(members, name);
    g = std::make_shared<GroupRunner>(*this, name, members, nullptr, std::move(c), true);
    // A sub-group may hold state of its own (a shard of the model): losing a member cannot be
    // made good by running its calls again, so it raises RankFailure unless the program says
    // the group is replicated (ftcc_torch.set_transparent(True, group)).
    g->set_transparent(false);
    std::lock_guard<std::mutex> lock(mu_);
    groups_.push_back(g);
  });
  return g;
}

void Runtime::fail_everything(const Failure& f) {
  std::vector<std::weak_ptr<GroupRunner>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) fatal_ = f;
    recovery_requested_ = false;
    groups = groups_;
  }
  world_->fail_all(f);
  for (auto& w : groups)
    if (auto g = w.lock()) g->fail_all(f);
}

std::exception_ptr Runtime::error_for(const Failure& f) { return make_failure_error(f); }

void Runtime::begin_step(std::int64_t step) {
  on_sentinel([&] {
    if (ended_) return;
    step_ = step;
    universe_->begin_step(step);
  });
}

// ---- the end ----------------------------------------------------------------------------------

int Runtime::leave_alone(const std::string& record, const std::string& why) {
  recovery::job_record::left(record);
  say(std::string("rank ") + std::to_string(universe_->original_rank()) + ": " + why);
  return static_cast<int>(recovery::ExitStatus::internal);
}

void Runtime::report_job_error(int status, const std::string& line) {
  if (!universe_->reports()) return;
  say(line);
  recovery::job_record::outcome(static_cast<recovery::ExitStatus>(status), line, universe_->initial_size(),
                                universe_->size(), universe_->new_processes_lost());
}

void Runtime::end_group() {
  std::vector<std::weak_ptr<GroupRunner>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    groups = groups_;
  }
  const std::string why = "the job ended (the program is exiting)";
  world_->stop(why);
  for (auto& w : groups)
    if (auto g = w.lock()) {
      g->stop(why);
      g->release_communicator();
    }
  world_->release_communicator();
  cancel_watch();
  universe_.reset();
  MPI_Finalize();
}

int Runtime::finish() {
  int status = 0;
  on_sentinel([&] {
    if (ended_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
    }
    cancel_watch();
    try {
      while (!universe_->all_finished(/*last=*/true)) {
      }
      // No outcome record: the program's own exit status, after MPI_Finalize, is the job's
      // (tools/ftcc-run reports mpirun's status when the survivors finalized; sys.exit(1) after a
      // clean end stays 1). The `finished` record starts ftcc-run's finish grace, so that a
      // process that never exits from here on (stopped, stuck in an exit handler) is stopped.
      if (universe_->rank() == 0) {
        universe_->check_current("finishing the job");
        const auto events = universe_->events().size();
        const std::string line = "the job finished on " + std::to_string(universe_->size()) + " of " +
                                 std::to_string(universe_->initial_size()) + " ranks (" + std::to_string(events) +
                                 (events == 1 ? " recovery)" : " recoveries)");
        say(line);
        recovery::job_record::finished(line);
      }
    } catch (const recovery::JobError& e) {
      status = static_cast<int>(e.status());
      report_job_error(status, e.line());
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
  on_sentinel([&] {
    if (ended_) return;
    std::optional<Failure> fatal;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      fatal = fatal_;
    }
    cancel_watch();
    if (fatal && !fatal->job_status) {  // a deadline, a broken group, superseded: leave alone
      status = leave_alone(fatal->message, fatal->message);
      return;
    }
    try {
      if (fatal) throw recovery::JobError(*fatal->job_status, -1, -1, fatal->message, true);
      universe_->fail_job(config_error ? recovery::ExitStatus::config_error : recovery::ExitStatus::job_error, message);
    } catch (const recovery::JobError& e) {
      status = static_cast<int>(e.status());
      report_job_error(status, fatal ? fatal->message : e.line());
    } catch (const std::exception& e) {
      status = leave_alone(e.what(), e.what());
      return;
    }
    end_group();
  });
  return status;
}

}  // namespace ftcc::torch_backend
