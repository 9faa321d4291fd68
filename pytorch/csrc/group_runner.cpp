#include "group_runner.hpp"

#include <Python.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/inflight_reconcile.hpp"
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

// An adopted result arrives as bytes: the call's own dtype again (a call with no result: none).
at::Tensor as_result(const OpTask& t, const at::Tensor& bytes) {
  if (!bytes.defined() || bytes.numel() == 0) return at::Tensor();
  return bytes.view(t.result_dtype);
}

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
    finish_collective(t, as_result(t, early));
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

// ---- reconciliation ---------------------------------------------------------------------------

void GroupRunner::reconcile(Resume r) {
  std::vector<int> old_members;
  int g = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old_members = members_;
    g = generation_;
    comm_ = r.comm;
    if (r.owned) {
      owned_ = std::move(r.owned);
      comm_ = owned_.get();
    }
  }
  RecoveryRecord rec;
  rec.group = name_;
  rec.epoch = r.epoch;
  rec.old_size = static_cast<int>(old_members.size());
  rec.new_size = static_cast<int>(r.members.size());
  for (std::size_t i = 0; i < old_members.size(); ++i) {
    if (old_members[i] == my_original_) rec.old_rank = static_cast<int>(i);
    if (std::find(r.members.begin(), r.members.end(), old_members[i]) == r.members.end()) {
      rec.failed.push_back(static_cast<std::int64_t>(i));
      rec.failed_original.push_back(old_members[i]);
    }
  }
  for (std::size_t i = 0; i < r.members.size(); ++i)
    if (r.members[i] == my_original_) rec.new_rank = static_cast<int>(i);

  // What this rank holds and what it still has to answer.
  bool p2p_pending = !in_flight_.empty();
  std::vector<OpTask*> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : queue_) {
      if (t.generation > g) continue;
      if (t.cls == OpClass::p2p) p2p_pending = true;
      else pending.push_back(&t);
    }
  }
  auto find_pending = [&](std::int64_t seq) -> OpTask* {
    for (OpTask* t : pending)
      if (t->seq == seq) return t;
    return nullptr;
  };
  auto lost = [&](int member) {
    return std::find(r.members.begin(), r.members.end(), member) == r.members.end();
  };
  std::vector<std::pair<std::int64_t, at::Tensor>> adopted_results;
  recovery::InflightView v;
  v.done = done_seq_;
  v.exact = transparent_.load() && !p2p_pending;
  enum : int { kExplicit = 1, kPointToPoint = 2 };
  v.why_not_code = !transparent_.load() ? kExplicit : kPointToPoint;
  v.why_not_text = [](int rank, int code) -> std::string {
    if (code == kExplicit)
      return "the group recovers explicitly (ftcc_torch.set_transparent(False); a sub-group does unless "
             "set_transparent(True, group) says its members are replicas)";
    return "rank " + std::to_string(rank) + " of the survivors had a point-to-point operation in flight";
  };
  v.held = [&](std::int64_t seq) {
    recovery::HeldResult h;
    for (const Retained& k : retained_) {
      if (k.seq != seq) continue;
      h.held = true;
      h.shareable = k.shareable;
      if (k.result.defined()) {
        h.data = k.result.data_ptr();
        h.bytes = static_cast<std::size_t>(k.result.nbytes());
      }
    }
    return h;
  };
  v.expects = [&](std::int64_t seq) -> std::int64_t {
    OpTask* t = find_pending(seq);
    return t ? t->result_bytes : -1;
  };
  v.cannot_redo = [&](std::int64_t hi) -> std::int64_t {
    for (OpTask* t : pending) {
      if (t->seq <= hi) continue;
      if (t->size_dependent) return t->seq;
      if (t->root_member >= 0 && lost(t->root_member) && t->cls != OpClass::shared_result) return t->seq;
    }
    return -1;
  };
  v.adopt = [&](std::int64_t seq, const void* data, std::size_t bytes) {
    at::Tensor copy = at::empty({static_cast<std::int64_t>(bytes)}, at::kByte);
    if (bytes > 0) std::memcpy(copy.data_ptr(), data, bytes);
    adopted_results.emplace_back(seq, copy);
  };
  recovery::ReconcileOutcome out;
  try {
    out = recovery::reconcile_inflight(*comm_, v);
  } catch (...) {
    const Verdict verdict = classify(std::current_exception());
    {
      std::lock_guard<std::mutex> lock(mu_);
      faulted_ = true;  // a further failure: the next recovery resumes this group again
      members_ = old_members;
    }
    if (verdict.kind == Verdict::fault) {
      rt_.request_recovery(name_ + ": reconciling the calls in flight: " + verdict.message);
      return;
    }
    Failure f;
    f.fatal = true;
    f.message = name_ + ": reconciling the calls in flight: " + verdict.message;
    fail_all(f);
    return;
  }
  rec.lo = out.lo;
  rec.hi = out.hi;
  rec.transparent = out.exact;
  rec.why_not = out.why_not;
  rec.first_seq_without = out.hi + 1;

  std::vector<OpTask> answered;       // adopted (answered with their result) or failed
  std::vector<at::Tensor> answered_with;
  std::function<void(int, int)> resize;
  std::optional<Failure> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members_ = r.members;
    generation_ = g + 1;
    if (out.exact) {
      forward_[g] = g + 1;
      // Adopted results: the queued call takes it now; a call not made yet takes it when made.
      for (auto& [seq, bytes] : adopted_results) {
        auto it = std::find_if(queue_.begin(), queue_.end(), [&](const OpTask& t) { return t.seq == seq; });
        if (it == queue_.end()) {
          adopted_early_[seq] = bytes;
          continue;
        }
        answered.push_back(std::move(*it));
        queue_.erase(it);
        answered_with.push_back(bytes);
        ++rec.adopted;
      }
      for (const auto& t : queue_)
        if (t.generation <= g && t.cls != OpClass::p2p && t.seq > out.hi) ++rec.redone;
      for (const auto& t : queue_)
        if (t.generation <= g && t.ddp_step >= 0 && t.seq > out.hi && rec.first_ddp_step_without < 0) {
          rec.first_ddp_step_without = t.ddp_step;
          rec.ddp_step_partial = t.ddp_bucket > 0;
        }
      for (const auto& t : queue_)
        if (t.generation <= g && t.root_member >= 0 && lost(t.root_member) && t.seq > out.hi)
          rec.broadcast_note = "broadcast #" + std::to_string(t.seq) +
                               ": its root was lost before any survivor received it; the survivors' rank 0 sent its "
                               "own data instead";
      resize = on_resize_;
    } else {
      Failure f;
      f.failed = rec.failed;
      f.failed_original = rec.failed_original;
      f.next_generation = g + 1;
      std::ostringstream m;
      m << "rank(s) " << rank_list(f.failed) << " of process group '" << name_ << "' failed; the survivors agreed on "
        << "them (" << rec.old_size << " -> " << rec.new_size << " ranks), and the calls in flight cannot be "
        << "completed for the program (" << out.why_not << "): continue on dist.shrink_group(e.failed_ranks)";
      f.message = m.str();
      failures_[g] = f;
      failed = f;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->generation <= g) {
          answered.push_back(std::move(*it));
          answered_with.emplace_back();
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      // Every survivor made the same calls up to hi; the next generation numbers from there.
      next_seq_ = out.hi + 1;
    }
    records_.push_back(rec);
  }
  if (out.exact) {
    done_seq_ = std::max(done_seq_, out.hi);
  } else {
    done_seq_ = out.hi;
    retained_.clear();
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.noticed).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    records_.back().ms = ms;
  }
  if (resize) resize(rec.new_rank, rec.new_size);
  for (std::size_t i = 0; i < answered.size(); ++i) {
    if (failed) {
      answer(answered[i], Runtime::error_for(*failed));
    } else {
      finish_collective(answered[i], as_result(answered[i], answered_with[i]));
    }
  }
  if (failed) {
    std::vector<InFlight> flying;
    flying.swap(in_flight_);
    for (auto& x : flying) answer(x.task, Runtime::error_for(*failed));
  }
  // The recovery line: in every member's record, printed once per group by its new rank 0.
  {
    std::ostringstream line;
    line << "group '" << name_ << "': rank(s) " << rank_list(rec.failed) << " lost, " << rec.old_size << " -> "
         << rec.new_size << " ranks; ";
    if (out.exact) {
      line << "transparent: ";
      if (out.hi > out.lo)
        line << "collective(s) #" << out.lo + 1 << (out.hi > out.lo + 1 ? "-#" + std::to_string(out.hi) : "")
             << " completed on some survivor (rank " << out.source << ") and were taken from it";
      else
        line << "no collective completed on only some survivors";
      line << ", the rest run again on the survivors";
      if (!rec.broadcast_note.empty()) line << "; " << rec.broadcast_note;
    } else {
      line << "the calls in flight raise RankFailure (" << out.why_not << ")";
    }
    line << " (" << static_cast<int>(ms * 10) / 10.0 << " ms since the failure was noticed)";
    {
      std::lock_guard<std::mutex> lock(mu_);
      records_.back().line = line.str();
    }
    if (rec.new_rank == 0) Runtime::say(line.str());
  }
}

}  // namespace ftcc::torch_backend
