// recovery/membership_protocol.cpp: ResilientGroup's recovery protocol (the top of
// recovery/resilient_group.hpp), one function per step, every ULFM call through FtComm
// (recovery/ft_comm.hpp): the same code runs on MPI and in the simulation.
#include <algorithm>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/recovery/group_internals.hpp"
#include "ftcc/recovery/heal_plan.hpp"
#include "ftcc/recovery/quorum_lost.hpp"
#include "ftcc/recovery/quorum_rule.hpp"
#include "ftcc/recovery/resilient_group.hpp"

namespace ftcc::recovery {

const RecoveryEvent& ResilientGroup::recover(std::int64_t step, const std::string& cause) {
  if (!fault_tolerant_) comm::require_ulfm("ResilientGroup::recover");
  const auto clock = RecoveryClock::start();  // before the entry agreement, which waits for the others
  enter_protocol();                           // 0. revoke + entry agreement
  return recover_attempts(step, cause, clock);  // 1-4, until one attempt succeeds
}

// The flags of the agreements on the pool, ANDed: 0 "I am recovering" (recover, fail_job);
// bit 0 "done" (all_finished); bit 1 "the job is over" (run_job's last all_finished). A waiting
// spare contributes both bits, so it never changes the result, and leaves when it sees bit 1.
namespace {
constexpr unsigned kDone = 1u, kJobOver = 2u;
}  // namespace

bool ResilientGroup::all_finished(bool last) {
  if (!fault_tolerant_) return true;  // without ULFM no rank can be lost and still be waited for
  if (left_as_spare_) return true;     // wait_as_spare() already saw the job's last agreement
  const auto clock = RecoveryClock::start();
  // "done": matches the entry agreement of recover() (flag 0) on the ranks still working.
  const unsigned flag = last ? kDone | kJobOver : kDone;
  const auto a = guarded("MPIX_Comm_agree", FaultPhase::agree, [&] { return ft_pool().agree(flag); });
  if ((a.flag & kDone) != 0 && !a.failure_noticed) return true;
  recover_attempts(committed_step_, a.failure_noticed ? "a rank failed at the end of the loop"
                                                      : "a rank was still recovering at the end of the loop",
                   clock);
  return false;
}

bool ResilientGroup::wait_as_spare() {
  FTCC_CHECK(pool_ && !comm_) << "wait_as_spare() on rank " << my_original_rank_ << ", which is not a hot spare";
  if (join_) {  // a new process: the recovery that started it is waiting for it (recovery/respawn.cpp)
    const std::unique_ptr<PendingJoin> join = std::move(join_);
    recover_attempts(join->step, join->event.cause, RecoveryClock::start(), join.get());
    if (comm_) return true;
  }
  for (;;) {
    // Counted like the training ranks' agreement it matches, so the heartbeat shows this spare
    // as having entered it; no deadline: a spare may wait here for the whole run.
    injector_.spare_wait(spare_waits_++);
    const std::uint32_t seq = ++ulfm_calls_;
    if (detector_) detector_->set_progress(seq);
    const auto a = pool_->agree_polled(kDone | kJobOver, [this] {
      if (watchdog_) watchdog_->kick();
    });
    if (!a.failure_noticed && a.flag == (kDone | kJobOver)) {
      left_as_spare_ = true;
      return false;
    }
    if (!a.failure_noticed && (a.flag & kDone) != 0) continue;  // the training ranks' end of loop: not the last
    recover_attempts(committed_step_, a.failure_noticed ? "a process failed (seen by a hot spare)"
                                                        : "the training ranks began a recovery",
                     RecoveryClock::start());
    if (comm_) return true;
  }
}

void ResilientGroup::fail_job(ExitStatus status, const std::string& message) {
  if (!fault_tolerant_) throw JobError(status, my_original_rank_, step_, message, false);
  pending_error_ = PendingError{status, message, step_};
  const auto clock = RecoveryClock::start();
  enter_protocol();
  recover_attempts(step_, "job error on rank " + std::to_string(my_original_rank_), clock);
  // Not reached while this rank lives: its error is in every agreed table, so the protocol throws.
  throw JobError(status, my_original_rank_, step_, message, false);
}

void ResilientGroup::revoke_training() {
  if (comm_) comm_->revoke();
}

void ResilientGroup::revoke_quietly() {
  revoke_training();
  if (pool_) pool_->revoke();
}

void ResilientGroup::enter_protocol() {
  // The training group only: the spares wait in an agreement on the pool, which this one matches.
  revoke_training();
  // Entry agreement: matches the one of all_finished(), where ranks that already finished wait.
  guarded("MPIX_Comm_agree", FaultPhase::agree, [&] { return ft_pool().agree(0u); });
}

const RecoveryEvent& ResilientGroup::recover_attempts(std::int64_t step, const std::string& cause,
                                                      RecoveryClock clock, PendingJoin* join) {
  RecoveryEvent ev;
  if (join) ev = join->event;  // a new process takes the recovery up where the survivors handed it over
  ev.step = step;
  // Recovery-phase faults name the recovery's step, the step in flight: a rank that saw the failure
  // before it began that step (in the previous step's work after its commit) has not told the
  // injector yet (begin_step), and a fault due "at step S" in this recovery would have waited for
  // a later one (seed 15 job 36 of tools/chaos: kill@shrink on rank 0 at step 30, 2 runs in 5).
  injector_.observe_step(step);
  ev.cause = cause;
  // The training group's size as every process knows it (a spare has no group of its own).
  if (!join) ev.old_size = pool_ ? static_cast<int>(members_.size()) : size();
  ev.my_old_rank = rank();
  const std::vector<int> before = join ? join->before : ulfm_members();
  AgreedTable table(max_originals());
  bool resume = join != nullptr;  // the first attempt is past step 3 already
  if (join) {
    table = std::move(join->table);
    clock.fault_ns = clock.first_notice_ns = join->fault_ns;
  }
  // Each step makes the same ULFM calls on every survivor; a step that returns false did so
  // on all of them (its agreement says so), and all of them start the next attempt together.
  for (int attempt = std::max(1, ev.attempts);; ++attempt) {
    ev.attempts = attempt;
    if (!resume) {
      injector_.in_phase(FaultPhase::recovery, attempt);
      if (!shrink_group(clock, ev)) continue;                   // 1. revoke + shrink
      if (!agree_on_table(before, clock, table, ev)) continue;  // 2. allgather the table + agree
      describe_new_group(before, table, clock, ev);             //    the event, as every survivor sees it
      if (!comm_) {  // a spare: the step in flight is the one after the most advanced commit
        ev.step = table.committed_max() + 1;
        injector_.observe_step(ev.step);
      }
      check_quorum(ev, table);                                  // 3. quorum lost: throws QuorumLost
      if (!join) record_group();                                //    on record: a stale process stops here
      if (auto e = table.job_error()) throw *e;                 //    a job-level error: throws JobError
    }
    const bool may_respawn = !resume;
    resume = false;
    if (pool_ && !heal(clock, ev, table, may_respawn)) continue;  // spares (and respawns) take lost slots + agree
    if (pool_ && !join) record_group();                           // new processes on record (by the survivors)
    describe_training_group(table, ev);
    if (!run_hooks(step, attempt, clock, ev)) continue;       // 4. hooks + agree
    ev.total_ms = clock.total_ms();
    return publish(std::move(ev));
  }
}

bool ResilientGroup::shrink_group(RecoveryClock& clock, RecoveryEvent& ev) {
  // Revoke (again: harmless) so every survivor's pending operation on this communicator fails.
  clock.start_phase();
  revoke_quietly();
  ev.revoke_ms += clock.lap();
  FtShrunk s;
  try {
    s = guarded("MPIX_Comm_shrink", FaultPhase::shrink, [&] { return ft_pool().shrink(); });
  } catch (const comm::FaultDetected&) {
    ev.shrink_ms += clock.lap();
    return false;  // a failure during the shrink itself: try again
  }
  ev.shrink_ms += clock.lap();
  std::vector<int> now_members;
  for (int old_rank : s.kept) now_members.push_back(ulfm_members().at(static_cast<size_t>(old_rank)));
  std::unique_ptr<FtComm> shrunk = std::move(s.comm);
  if (pool_) {
    // The training group is re-formed from the new pool by heal(); until then the old one stays.
    pool_ = std::move(shrunk);
    pool_members_ = std::move(now_members);
    return true;
  }
  comm_ = std::move(shrunk);
  members_ = std::move(now_members);
  install_fault_hook();
  return true;
}

std::vector<int> ResilientGroup::lost_since(const std::vector<int>& before) const {
  std::vector<int> lost;
  const std::vector<int>& now = ulfm_members();
  for (int r : before)
    if (std::find(now.begin(), now.end(), r) == now.end()) lost.push_back(r);
  return lost;
}

bool ResilientGroup::agree_on_table(const std::vector<int>& before, RecoveryClock& clock, AgreedTable& table,
                                    RecoveryEvent& ev) {
  // A rank whose allgather failed revokes (so nobody waits for it there) and contributes 0.
  bool have_table = true;
  try {
    // The deaths this rank can confirm: lost ranks on its own host whose process is gone. A rank
    // fenced a moment ago (SIGKILL) may not have died yet, on a loaded machine: each gets until a
    // shared deadline of kConfirmWait to go (a live one, never killed, costs that wait once).
    constexpr auto kConfirmWait = std::chrono::milliseconds(500);
    const auto confirm_by = std::chrono::steady_clock::now() + kConfirmWait;
    // New processes started in an earlier attempt of this recovery count as members too (as in
    // describe_new_group): one lost since is confirmed like any other, or the quorum rule would
    // count it as a death nobody can confirm.
    std::vector<int> members_before = before;
    members_before.insert(members_before.end(), ev.respawned.begin(), ev.respawned.end());
    std::vector<int> confirmed;
    const std::string& my_host = peer(my_original_rank_).host_id;
    for (int r : lost_since(members_before)) {
      const PeerAddress& p = peer(r);
      if (p.host_id == my_host && confirm_gone_(r, confirm_by)) confirmed.push_back(r);
    }
    const std::int64_t flags = comm_ && hooks_.empty() ? AgreedTable::kEnding : 0;
    table.gather(ft_pool(), table.row_of(my_original_rank_, committed_step_, clock.notice_wall_ns,
                                      pending_error_ ? &*pending_error_ : nullptr, confirmed, flags,
                                      silence_began_ns_.load()));
  } catch (const comm::FaultDetected&) {
    have_table = false;
    revoke_quietly();
  }
  const bool all = agree_on(have_table);
  ev.agree_ms += clock.lap();
  return all;
}

void ResilientGroup::describe_new_group(const std::vector<int>& before, const AgreedTable& table,
                                        RecoveryClock& clock, RecoveryEvent& ev) {
  // New processes started in an earlier attempt of this recovery count as members too.
  std::vector<int> members_before = before;
  members_before.insert(members_before.end(), ev.respawned.begin(), ev.respawned.end());
  ev.failed = lost_since(members_before);
  ev.culprits.clear();
  for (int r : ev.failed) {
    const PeerAddress& p = peer(r);
    ev.culprits.push_back("rank " + std::to_string(r) + " on host " + p.host + " pid " + std::to_string(p.pid));
    if (detector_) detector_->remove(r);
  }
  clock.first_notice_ns = table.notice_ns(0);
  for (int i = 0; i < table.rows(); ++i) clock.first_notice_ns = std::min(clock.first_notice_ns, table.notice_ns(i));
  clock.fault_ns = -1;
  for (int r : ev.failed)
    if (auto t = FaultInjector::read_fault_time_ns(event_dir_, r))
      clock.fault_ns = clock.fault_ns < 0 ? *t : std::min(clock.fault_ns, *t);
  // No injected fault (a real hang, a cut link): the silence the heartbeat found began then. A
  // death ULFM reported (no silence) leaves it unknown.
  if (const auto silence = table.silence_began_ns(); clock.fault_ns < 0 && silence <= clock.first_notice_ns)
    clock.fault_ns = silence;
  ev.detect_ms = clock.detect_ms();
}

void ResilientGroup::describe_training_group(const AgreedTable& table, RecoveryEvent& ev) {
  ev.survivors = members_;
  // A spare that joined in an attempt and was lost in a later one did not join.
  std::erase_if(ev.joined, [&](int r) { return std::find(members_.begin(), members_.end(), r) == members_.end(); });
  ev.new_size = static_cast<int>(members_.size());
  ev.my_new_rank = rank();
  ev.spares_left = pool_ ? spares_left() : -1;
  ev.respawns_left = opt_.respawns > 0 ? respawns_left_ : -1;
  // committed_min/max: the consistency point of the ranks that held state (a newcomer holds none:
  // its committed step, -1, is in ev.committed but not in them).
  ev.committed.assign(members_.size(), -1);
  ev.committed_min = std::numeric_limits<std::int64_t>::max();
  ev.committed_max = std::numeric_limits<std::int64_t>::min();
  for (size_t i = 0; i < members_.size(); ++i) {
    ev.committed[i] = table.committed_of(members_[i]);
    if (std::find(ev.joined.begin(), ev.joined.end(), members_[i]) != ev.joined.end()) continue;
    ev.committed_min = std::min(ev.committed_min, ev.committed[i]);
    ev.committed_max = std::max(ev.committed_max, ev.committed[i]);
  }
}

bool ResilientGroup::heal(RecoveryClock& clock, RecoveryEvent& ev, const AgreedTable& table, bool may_respawn) {
  clock.start_phase();
  // Past the end of the program's loop (a training rank without hooks) no newcomer can be given
  // the state: lost places are dropped, the spares keep waiting for the job's last agreement.
  const bool fill = !table.ending();
  HealPlan plan = plan_heal(slots_, pool_members_, holders_, fill);  // the same on every survivor
  if (fill && may_respawn && !plan.state_lost && !plan.dropped_slots.empty() && respawns_left_ > 0) {
    // Places no spare was left for: start new processes for them (recovery/respawn.cpp).
    if (respawn(std::min(static_cast<int>(plan.dropped_slots.size()), respawns_left_), clock, ev, table))
      plan = plan_heal(slots_, pool_members_, holders_, fill);
    clock.start_phase();
  }
  if (plan.state_lost) {
    std::string who;
    for (int r : ev.failed) who += (who.empty() ? "" : ", ") + std::to_string(r);
    throw JobError(ExitStatus::job_error, ev.failed.empty() ? -1 : ev.failed.front(), -1,  // the step: no survivor knows
                   "every process that held training state was lost (ranks " + who + "); the " +
                       std::to_string(pool_members_.size()) + " hot spare(s) alive hold none, so the job cannot go on",
                   true);
  }
  slots_ = plan.slots;  // before the split, on every survivor: a retry plans from here
  ev.joined.insert(ev.joined.end(), plan.joined.begin(), plan.joined.end());
  bool formed = true;
  try {
    guarded("MPI_Comm_split", FaultPhase::shrink, [&] {
      form_training_group();
      return 0;
    });
  } catch (const comm::FaultDetected&) {
    formed = false;
    revoke_quietly();
  }
  const bool all = agree_on(formed);
  ev.heal_ms += clock.lap();
  return all;
}

void ResilientGroup::check_quorum(const RecoveryEvent& ev, const AgreedTable& table) {
  QuorumInput in{ulfm_members(), ev.failed, {}};
  for (int r : ev.failed)
    if (table.confirmed_by_any(r)) in.confirmed.push_back(r);
  const QuorumDecision d = decide_quorum(in);
  if (d.go_on) return;
  quorum_lost_ = true;
  QuorumLost q(ulfm_members(), ev.failed, d.unconfirmed, d.old_size);
  job_record::quorum_lost(my_original_rank_, q.what());
  throw q;
}

bool ResilientGroup::run_hooks(std::int64_t step, int attempt, RecoveryClock& clock, RecoveryEvent& ev) {
  bool hooks_ok = true;
  transfer_bytes_ = 0;
  transfer_ms_ = 0;
  try {
    injector_.in_phase(FaultPhase::hooks, attempt);
    if (comm_)  // a spare still waiting holds no state for the hooks to restore
      for (auto& hook : hooks_) hook(*this, ev);
  } catch (const comm::FaultDetected&) {
    hooks_ok = false;
  } catch (const std::exception& e) {
    // Not a lost rank: an error in the hook's own work, which the next attempt reports as a
    // job-level error on every survivor.
    pending_error_ = PendingError{ExitStatus::job_error, std::string("in a recovery hook: ") + e.what(), step};
    hooks_ok = false;
  }
  if (!hooks_ok) revoke_quietly();
  const bool all = agree_on(hooks_ok);
  ev.resync_ms += clock.lap();
  ev.transfer_bytes = transfer_bytes_;
  ev.transfer_ms = transfer_ms_;
  return all;
}

bool ResilientGroup::agree_on(bool mine) {
  const auto a = guarded("MPIX_Comm_agree", FaultPhase::agree,
                         [&] { return ft_pool().agree(mine ? 1u : 0u); });
  return a.flag == 1 && !a.failure_noticed;  // the same decision on every survivor
}

// A new process does not record its group: it is not on record until the survivors record the
// group it joined (after heal, before the recovery's last agreement).
void ResilientGroup::record_group() {
  try {
    fence_.advance(job_id_, ulfm_members(), my_original_rank_);
  } catch (const Superseded&) {
    superseded_ = true;
    throw;
  }
}

const RecoveryEvent& ResilientGroup::publish(RecoveryEvent ev) {
  if (pool_) holders_ = members_;  // the training group now holds the state (the hooks ran)
  silence_began_ns_ = 0;           // the silences found so far were this recovery's
  events_.push_back(std::move(ev));
  const RecoveryEvent& e = events_.back();
  if (rank() == 0) {
    if (opt_.verbose) {
      std::fprintf(stderr, "ftcc: %s\n", e.summary().c_str());
      std::fflush(stderr);
    }
    if (!opt_.event_log.empty()) {
      std::ofstream log(opt_.event_log, std::ios::app);
      log << e.to_json().dump() << "\n";
    }
  }
  return e;
}

void ResilientGroup::form_training_group() {
  const int slot = slots_.at(static_cast<size_t>(my_original_rank_));
  std::unique_ptr<FtComm> out = pool_->split(slot >= 0 ? 0 : -1, slot >= 0 ? slot : 0);
  members_ = training_members(slots_);
  comm_ = std::move(out);  // null on a spare
  install_fault_hook();
}

}  // namespace ftcc::recovery
