// pytorch/csrc/group_runner.cpp: a group's worker: calls queued and run in order (on the worker, or on the
// thread of a caller that waits), results kept for the other survivors; its side of a recovery is
// group_runner_reconcile.cpp (group_runner.hpp states the contract).
#include "group_runner.hpp"

#include <Python.h>

#include <algorithm>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "failure_verdict.hpp"
#include "runtime.hpp"

namespace ftcc::torch_backend {
namespace {

// The runner whose tasks this thread is executing (nested waits on it would wait for themselves).
thread_local GroupRunner* t_executing = nullptr;

struct Executing {
  GroupRunner* saved;
  explicit Executing(GroupRunner* r) : saved(t_executing) { t_executing = r; }
  ~Executing() { t_executing = saved; }
};

}  // namespace

GroupRunner::GroupRunner(Runtime& rt, std::string name, std::vector<int> members, comm::Communicator* comm,
                         std::unique_ptr<comm::Communicator> owned, bool rebuildable)
    : rt_(rt),
      name_(std::move(name)),
      rebuildable_(rebuildable),
      members_(std::move(members)),
      my_original_(rt.original_rank()),
      comm_(comm),
      owned_(std::move(owned)) {
  if (owned_) comm_ = owned_.get();
  worker_ = std::thread([this] { loop(); });
}

GroupRunner::~GroupRunner() {
  stop("the process group was destroyed");
  if (worker_.joinable()) worker_.join();
}

// ---- state ------------------------------------------------------------------------------------

int GroupRunner::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

int GroupRunner::effective_generation(int g) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = forward_.find(g); it != forward_.end(); it = forward_.find(g)) g = it->second;
  return g;
}

std::vector<int> GroupRunner::members() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_;
}

int GroupRunner::rank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rank_of(my_original_);
}

int GroupRunner::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(members_.size());
}

int GroupRunner::rank_of(int member) const {
  auto it = std::find(members_.begin(), members_.end(), member);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

std::optional<Failure> GroupRunner::failure(int g) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (fatal_) return fatal_;
  for (;;) {
    if (auto it = failures_.find(g); it != failures_.end()) return it->second;
    auto f = forward_.find(g);
    if (f == forward_.end()) return std::nullopt;
    g = f->second;
  }
}

std::vector<RecoveryRecord> GroupRunner::recoveries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

void GroupRunner::set_on_resize(const void* owner, std::function<void(int, int)> f) {
  std::lock_guard<std::mutex> lock(mu_);
  on_resize_ = std::move(f);
  on_resize_owner_ = owner;
}

void GroupRunner::clear_on_resize(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  if (on_resize_owner_ != owner) return;
  on_resize_ = nullptr;
  on_resize_owner_ = nullptr;
}

// ---- calls ------------------------------------------------------------------------------------

std::uint64_t GroupRunner::submit(OpTask t) {
  const std::uint64_t id = t.id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    FTCC_CHECK(!stop_) << t.name << ": the ftcc backend has shut down (" << stop_why_ << ")";
    if (t.cls != OpClass::p2p) t.seq = next_seq_++;
    if (t.ddp_step >= 0) {
      ddp_started_.store(std::max(ddp_started_.load(), t.ddp_step + 1));
      // The first DDP bucket past a transparent recovery's boundary: what the sampler needs.
      if (!records_.empty()) {
        RecoveryRecord& last = records_.back();
        if (last.transparent && last.first_ddp_step_without < 0 && t.seq > last.hi) {
          last.first_ddp_step_without = t.ddp_step;
          last.ddp_step_partial = t.ddp_bucket > 0;
        }
      }
    }
    t.submitted = std::chrono::steady_clock::now();
    queue_.push_back(std::move(t));
  }
  cv_.notify_all();
  return id;
}

bool GroupRunner::may_start_locked() const { return !paused_ && !faulted_ && !resume_ && !stop_; }

void GroupRunner::help(std::uint64_t id) {
  FTCC_CHECK(t_executing != this) << "an ftcc operation of group '" << name_
                                  << "' was waited for from inside another one of the same group (a future's "
                                     "callback that waits for a collective): chain it with .then() instead of waiting";
  std::unique_lock<std::mutex> lock(mu_);
  if (running_ || !may_start_locked()) return;  // running elsewhere, or the group is recovering: wait on the Work
  if (std::none_of(queue_.begin(), queue_.end(), [&](const OpTask& t) { return t.id == id; })) return;
  running_ = true;
  {
    Executing mark(this);
    drain(lock, id);
  }
  running_ = false;
  cv_.notify_all();
}

void GroupRunner::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stop_ && !running_) break;
    if (resume_ && !running_) {
      Resume r = std::move(*resume_);
      resume_.reset();
      running_ = true;
      lock.unlock();
      {
        Executing mark(this);
        reconcile(std::move(r));
      }
      lock.lock();
      running_ = false;
      cv_.notify_all();
      continue;
    }
    if (!running_ && may_start_locked() && (!queue_.empty() || !in_flight_.empty())) {
      if (in_flight_.empty()) {
        // A call made moments ago is left to its caller for kInlineGrace: a caller that waits for
        // it runs it on its own thread (help()), saving two thread switches.
        const auto age = std::chrono::steady_clock::now() - queue_.front().submitted;
        if (age < kInlineGrace) {
          cv_.wait_for(lock, kInlineGrace - age);
          continue;
        }
      }
      running_ = true;
      {
        Executing mark(this);
        drain(lock, 0);
      }
      running_ = false;
      cv_.notify_all();
      // Point-to-point still in flight: poll again in about 20 us, or as soon as work comes.
      if (!in_flight_.empty() && queue_.empty())
        cv_.wait_for(lock, std::chrono::microseconds(20), [&] { return stop_ || resume_ || paused_ || !queue_.empty(); });
      continue;
    }
    cv_.wait(lock);
  }
  // Stopped: whatever is left is answered (the program is ending).
  std::deque<OpTask> left;
  left.swap(queue_);
  std::vector<InFlight> flying;
  flying.swap(in_flight_);
  const std::string why = stop_why_;
  lock.unlock();
  for (auto& f : flying) f.poll = nullptr;
  for (auto& t : left) answer(t, std::make_exception_ptr(ftcc::Error(std::string(t.name) + ": " + why)));
  for (auto& f : flying) answer(f.task, std::make_exception_ptr(ftcc::Error(std::string(f.task.name) + ": " + why)));
}

void GroupRunner::drain(std::unique_lock<std::mutex>& lock, std::uint64_t until) {
  while (may_start_locked()) {
    if (!in_flight_.empty()) {
      lock.unlock();
      poll_in_flight();
      lock.lock();
      if (!may_start_locked()) break;
    }
    if (queue_.empty()) break;
    if (until != 0 && std::none_of(queue_.begin(), queue_.end(), [&](const OpTask& t) { return t.id == until; })) break;
    OpTask t = std::move(queue_.front());
    queue_.pop_front();
    const std::uint64_t ran = t.id;
    lock.unlock();
    execute(t);
    lock.lock();
    if (until != 0 && ran == until) break;
  }
}

void GroupRunner::answer(OpTask& t, std::exception_ptr e, const at::Tensor& result) {
  auto done = std::move(t.done);
  t.done = nullptr;
  if (done) done(std::move(e), result);
}

void GroupRunner::execute(OpTask& t) {
  if (auto f = failure(t.generation)) {
    answer(t, Runtime::error_for(*f));
    return;
  }
  int rank_now = -1;
  at::Tensor early;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = adopted_early_.find(t.seq); t.seq >= 0 && it != adopted_early_.end()) {
      early = it->second;
      adopted_early_.erase(it);
    }
    const int who = t.cls == OpClass::p2p ? t.peer_member : t.root_member;
    if (who >= 0) rank_now = rank_of(who);
  }
  if (early.defined()) {  // another survivor completed this call before this rank made it
    finish_collective(t, adopted_result(t, early));
    return;
  }
  try {
    if (t.cls == OpClass::p2p) {
      FTCC_CHECK(rank_now >= 0) << t.name << ": the peer left the group";
      OpTask::Poll p = t.start(*comm_, rank_now);
      if (p) {
        in_flight_.push_back(InFlight{std::move(t), std::move(p)});
        return;
      }
      answer(t, nullptr);
      return;
    }
    // A broadcast whose root was lost before anyone received its data: the survivors' rank 0
    // sends its own (the recovery line says so). Other rooted calls never run without their root
    // (the reconciliation reports them).
    if (t.root_member >= 0 && rank_now < 0) rank_now = 0;
    at::Tensor r = t.compute(*comm_, rank_now);
    finish_collective(t, r);
  } catch (...) {
    const Verdict v = classify(std::current_exception());
    if (v.kind == Verdict::fault) {
      on_fault(t, v.message);
    } else {
      answer(t, error_after(v, std::current_exception()));
    }
  }
}

std::exception_ptr GroupRunner::error_after(const Verdict& v, std::exception_ptr e) {
  if (v.kind == Verdict::call_error) return e;  // bad use, found before any message: the group is intact
  // A deadline or a broken communicator: the group cannot go on (runtime.hpp: fatal), whether
  // the call ran here or was polled in flight.
  Failure f;
  f.fatal = true;
  f.message = name_ + ": " + v.message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) fatal_ = f;
  }
  return Runtime::error_for(f);
}

void GroupRunner::finish_collective(OpTask& t, const at::Tensor& result) {
  if (t.commit) t.commit(result);
  done_seq_ = std::max(done_seq_, t.seq);
  retained_.push_back(Retained{t.seq, result, t.cls == OpClass::shared_result});
  // Completing a fully dependent call here means every member completed everything before it.
  if (t.fully_dependent)
    while (!retained_.empty() && retained_.front().seq < t.seq) retained_.pop_front();
  if (t.ddp_last) ddp_completed_.store(std::max(ddp_completed_.load(), t.ddp_step + 1));
  answer(t, nullptr, result);
}

void GroupRunner::poll_in_flight() {
  for (std::size_t i = 0; i < in_flight_.size();) {
    InFlight& f = in_flight_[i];
    std::exception_ptr error;
    bool done = false;
    try {
      done = f.poll();
    } catch (...) {
      const Verdict v = classify(std::current_exception());
      if (v.kind == Verdict::fault) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          faulted_ = true;
        }
        rt_.request_recovery(name_ + ": " + f.task.name + ": " + v.message);
        return;  // answered by the reconciliation (point-to-point in flight: RankFailure)
      }
      error = error_after(v, std::current_exception());
      done = true;
    }
    if (!done) {
      ++i;
      continue;
    }
    InFlight finished = std::move(f);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    finished.poll = nullptr;
    answer(finished.task, error);
  }
}

void GroupRunner::on_fault(OpTask& t, const std::string& cause) {
  const std::string what = name_ + ": " + t.name + ": " + cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    faulted_ = true;
    queue_.push_front(std::move(t));  // answered after the recovery: adopted, run again, or RankFailure
  }
  rt_.request_recovery(what);
}

// ---- the runtime's side -------------------------------------------------------------------------

void GroupRunner::pause(bool revoke_first) {
  if (revoke_first && comm_ && comm_->raw() != MPI_COMM_NULL) {
    try {
      comm::revoke(comm_->raw());
    } catch (...) {
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  paused_ = true;
  cv_.wait(lock, [&] { return !running_; });
  // Nobody executes now: the point-to-point requests hold the old communicator; let them go.
  for (auto& f : in_flight_) f.poll = nullptr;
}

bool GroupRunner::paused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return paused_;
}

void GroupRunner::resume(Resume r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    resume_ = std::move(r);
    paused_ = false;
    faulted_ = false;
  }
  cv_.notify_all();
}

void GroupRunner::fail_all(const Failure& f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fatal_) fatal_ = f;
    paused_ = false;
    faulted_ = false;
    resume_.reset();
  }
  cv_.notify_all();
  // The worker answers what is queued (execute() sees fatal_); in-flight requests too:
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !running_; });
  std::vector<InFlight> flying;
  flying.swap(in_flight_);
  lock.unlock();
  for (auto& x : flying) x.poll = nullptr;
  for (auto& x : flying) answer(x.task, Runtime::error_for(f));
}

void GroupRunner::stop(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    stop_why_ = why;
  }
  cv_.notify_all();
  if (worker_.joinable() && std::this_thread::get_id() != worker_.get_id()) {
    // The worker may need the GIL to finish (a task's last reference to a tensor made in Python,
    // a Work's callbacks): a caller holding it (a backend freed by Python, destroy_process_group)
    // lets go of it while it waits, or both would wait for ever.
    PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    worker_.join();
    if (saved) PyEval_RestoreThread(saved);
  }
}

bool GroupRunner::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

void GroupRunner::release_communicator() {
  std::lock_guard<std::mutex> lock(mu_);
  comm_ = nullptr;
  owned_.reset();
}

}  // namespace ftcc::torch_backend
