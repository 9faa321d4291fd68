// pytorch/csrc/group_runner_reconcile.cpp: a group's side of a recovery (GroupRunner::reconcile):
// the calls every survivor holds are matched up, a result some survivor completed is handed to the
// others, the rest run again on the survivors, and point-to-point in flight ends in RankFailure
// (group_runner.hpp states the contract; recovery/inflight_reconcile.hpp the matching).
#include <algorithm>
#include <cstring>
#include <sstream>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/inflight_reconcile.hpp"
#include "failure_verdict.hpp"
#include "group_runner.hpp"
#include "runtime.hpp"

namespace ftcc::torch_backend {

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
      finish_collective(answered[i], adopted_result(answered[i], answered_with[i]));
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
