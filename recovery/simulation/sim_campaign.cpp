#include "ftcc/recovery/simulation/sim_campaign.hpp"

#include <algorithm>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/recovery/run_job.hpp"
#include "ftcc/recovery/step_loop.hpp"

namespace ftcc::recovery::sim {
namespace {

std::uint64_t apply_step(std::uint64_t hash, std::int64_t step) {
  return (hash ^ static_cast<std::uint64_t>(step + 1)) * 0x100000001b3ULL + 0x9e37;
}

std::uint64_t reference_hash(int steps) {
  std::uint64_t h = 1;
  for (int s = 0; s < steps; ++s) h = apply_step(h, s);
  return h;
}

std::string list(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';  // (not `sep + to_string(...)`: GCC 12 warns, wrongly, of an overlapping memcpy there)
    out += std::to_string(v[i]);
  }
  return out + "]";
}

// What one simulated process ended with.
struct ProcEnd {
  bool ended = false;
  bool turned_away = false;  // a new process the survivors did not take in (its hand-over failed)
  JobEnd end;
  bool trains = false;   // holds a slot at the end
  bool error_fired = false;
  bool loop_done = false;  // its training loop returned (every step applied, the survivors agreed)
  std::int64_t step = 0;
  std::uint64_t hash = 1;
  std::int64_t committed = -1;
  std::vector<int> members;
  std::vector<RecoveryEvent> events;
};

// The training-shaped body (see the header).
void train(ResilientGroup& g, const Schedule& s, int proc, ProcEnd& out) {
  g.add_recovery_hook([&out](ResilientGroup& g, const RecoveryEvent&) {
    // Roll forward: every member takes the most advanced (step, state).
    const std::int64_t mine[2] = {out.step, static_cast<std::int64_t>(out.hash)};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(g.size()));
    g.ft_comm().allgather(mine, all.data(), 2);
    std::size_t best = 0;
    for (std::size_t i = 1; i < static_cast<std::size_t>(g.size()); ++i)
      if (all[2 * i] > all[2 * best]) best = i;
    out.step = all[2 * best];
    out.hash = static_cast<std::uint64_t>(all[2 * best + 1]);
    g.set_committed_step(out.step - 1);
  });
  if (g.is_spare() && !g.wait_as_spare()) return;
  run_step_loop(g, {.done = [&] { return out.step >= s.steps; },
                    .step = [&] { return out.step; },
                    .body = [&] {
                      if (proc == s.error_proc && out.step == s.error_step && !out.error_fired) {
                        out.error_fired = true;
                        throw std::runtime_error("injected error at step " + std::to_string(out.step));
                      }
                      const std::int64_t mine[2] = {out.step, static_cast<std::int64_t>(out.hash)};
                      std::vector<std::int64_t> all(2 * static_cast<std::size_t>(g.size()));
                      g.ft_comm().allgather(mine, all.data(), 2);
                      for (int i = 0; i < g.size(); ++i)
                        if (all[2 * static_cast<std::size_t>(i)] != mine[0] || all[2 * static_cast<std::size_t>(i) + 1] != mine[1])
                          throw std::logic_error("rank " + std::to_string(i) + " of the training group is at step " +
                                                 std::to_string(all[2 * static_cast<std::size_t>(i)]) +
                                                 " (or another state) while rank " + std::to_string(g.rank()) +
                                                 " is at step " + std::to_string(mine[0]));
                      out.hash = apply_step(out.hash, out.step);
                      ++out.step;
                      g.set_committed_step(out.step - 1);
                    }});
  out.loop_done = true;
}

struct EventKey {
  std::vector<int> failed, survivors, joined;
  bool operator==(const EventKey&) const = default;
};

std::vector<EventKey> keys_of(const std::vector<RecoveryEvent>& evs) {
  std::vector<EventKey> out;
  for (const auto& e : evs) out.push_back({e.failed, e.survivors, e.joined});
  return out;
}

void check(const Schedule& s, const SimWorld& w, const std::vector<ProcEnd>& ends, RunReport& r) {
  auto fail = [&](const std::string& what) { r.violations.push_back(what); };
  std::optional<ExitStatus> status;
  bool any_error = false, any_trains = false;
  std::set<int> ever_held;
  for (int p = 0; p < s.ranks; ++p) ever_held.insert(p);
  const ProcEnd* first = nullptr;
  for (int p = 0; p < w.procs(); ++p) {
    const ProcEnd& e = ends[static_cast<std::size_t>(p)];
    any_error = any_error || e.error_fired;
    for (const auto& ev : e.events) ever_held.insert(ev.joined.begin(), ev.joined.end());
    if (w.gone(p) || e.turned_away) continue;
    if (!e.ended) {
      fail("process " + std::to_string(p) + " is alive but never ended its job");
      continue;
    }
    ++r.survivors;
    if (e.end.alone != (e.end.status == ExitStatus::quorum_lost))
      fail("process " + std::to_string(p) + (e.end.alone ? " left alone" : " ended with the others") + " with status " +
           std::to_string(static_cast<int>(e.end.status)));
    if (status && *status != e.end.status)
      fail("exit statuses differ: " + std::to_string(static_cast<int>(*status)) + " and process " + std::to_string(p) +
           "'s " + std::to_string(static_cast<int>(e.end.status)));
    status = status.value_or(e.end.status);
    any_trains = any_trains || e.trains;
    if (!first) {
      first = &e;
      r.recoveries = static_cast<int>(e.events.size());
      for (const auto& ev : e.events)
        r.joined_new += static_cast<int>(std::count_if(ev.joined.begin(), ev.joined.end(), [&](int j) { return j >= s.procs(); }));
    } else if (keys_of(first->events) != keys_of(e.events)) {
      fail("process " + std::to_string(p) + " recorded other recoveries than the first survivor (" +
           std::to_string(e.events.size()) + " vs " + std::to_string(first->events.size()) + ")");
    }
    std::set<int> joined;
    for (const auto& ev : e.events)
      for (int j : ev.joined) {
        if (!joined.insert(j).second) fail("process " + std::to_string(j) + " joined twice (seen by " + std::to_string(p) + ")");
        if (j < s.ranks) fail("process " + std::to_string(j) + ", which was not a spare, joined");
        if (j >= s.procs() + s.respawns) fail("process " + std::to_string(j) + " joined, past the respawns allowed");
      }
  }
  if (!status) return;  // nobody survived: nothing to agree on
  r.status = *status;
  const bool state_lost = std::all_of(ever_held.begin(), ever_held.end(), [&](int p) { return w.gone(p); });
  if (*status == ExitStatus::job_error && !any_error && !state_lost)
    fail("the job failed (status 4) though no error was injected and a process holding the state survived");
  if (*status == ExitStatus::quorum_lost && s.hosts == 1)
    fail("quorum lost on one host, where every death is confirmed");
  if (*status != ExitStatus::finished && *status != ExitStatus::job_error && *status != ExitStatus::quorum_lost)
    fail("exit status " + std::to_string(static_cast<int>(*status)) + " is not one this job can end with (0, 3 or 4)");
  if (*status != ExitStatus::finished) return;
  // Every training process may die once its loop is done (after the loop's agreement that all
  // are done): the spares then end the job alone, and it did finish. Not before.
  if (!any_trains)
    for (int p = 0; p < w.procs(); ++p)
      if (ever_held.count(p) && !ends[static_cast<std::size_t>(p)].loop_done)
        fail("the job finished (status 0) with no surviving process training, though process " + std::to_string(p) +
             " was lost before its training loop was done");
  const std::uint64_t want = reference_hash(s.steps);
  const ProcEnd* trainer = nullptr;
  for (int p = 0; p < w.procs(); ++p) {
    const ProcEnd& e = ends[static_cast<std::size_t>(p)];
    if (w.gone(p) || e.turned_away || !e.ended || !e.trains) continue;
    if (e.step != s.steps || e.hash != want)
      fail("process " + std::to_string(p) + " ended at step " + std::to_string(e.step) +
           (e.hash != want ? " with a state that is not each step applied once" : ""));
    if (e.committed != s.steps - 1) fail("process " + std::to_string(p) + " committed step " + std::to_string(e.committed));
    if (trainer && trainer->members != e.members)
      fail("members differ: " + list(trainer->members) + " and process " + std::to_string(p) + "'s " + list(e.members));
    trainer = trainer ? trainer : &e;
  }
}

}  // namespace

std::string Schedule::describe() const {
  std::string out = "seed " + std::to_string(seed) + ": " + std::to_string(ranks) + " ranks, " + std::to_string(spares) +
                    " spare(s), " + (respawns ? std::to_string(respawns) + " respawn(s), " : "") + std::to_string(steps) +
                    " steps, " + std::to_string(hosts) + " host(s)\n";
  for (const auto& f : faults)
    out += "  " + std::string(to_string(f.kind)) + " process " + std::to_string(f.proc) + " " + to_string(f.when) +
           " its call " + std::to_string(f.at_call) +
           (f.kind == FaultKind::stall ? " for " + std::to_string(f.stall_us / 1000) + " ms" : "") + "\n";
  if (error_proc >= 0)
    out += "  process " + std::to_string(error_proc) + " throws at step " + std::to_string(error_step) + "\n";
  return out;
}

Schedule schedule_of(std::uint64_t seed) {
  SimRng rng(seed * 0x2545f4914f6cdd1dULL + 17);
  Schedule s;
  s.seed = seed;
  s.ranks = 2 + static_cast<int>(rng.below(4));
  s.spares = static_cast<int>(rng.below(3));
  s.steps = 2 + static_cast<int>(rng.below(6));
  const int faults = static_cast<int>(rng.below(4));
  int fatal = 0;
  for (int i = 0; i < faults; ++i) {
    SimFault f;
    f.proc = static_cast<int>(rng.below(static_cast<std::uint64_t>(s.procs())));
    const auto k = rng.below(4);
    f.kind = k < 2 ? FaultKind::kill : (k == 2 ? FaultKind::hang : FaultKind::stall);
    if (f.kind != FaultKind::stall && ++fatal >= s.procs()) f.kind = FaultKind::stall;  // someone survives
    f.when = static_cast<FaultWhen>(rng.below(3));
    f.at_call = 1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(s.steps) + 8));
    f.stall_us = 1 + static_cast<std::int64_t>(rng.below(3'000'000));
    s.faults.push_back(f);
  }
  s.hosts = rng.coin() ? 1 : 2 + static_cast<int>(rng.below(2));
  if (rng.below(10) == 0) {
    s.error_proc = static_cast<int>(rng.below(static_cast<std::uint64_t>(s.ranks)));
    s.error_step = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(s.steps)));
  }
  // Respawns from a stream of their own, so that the draws above are those of the seeds before
  // respawns were simulated.
  SimRng more(seed * 0x9e3779b97f4a7c15ULL + 101);
  if (more.coin()) s.respawns = 1 + static_cast<int>(more.below(2));
  // And in half of those, a fault in a new process (its calls count from its start: the
  // hand-over is part of the recovery that started it).
  if (s.respawns > 0 && more.coin()) {
    SimFault f;
    f.proc = s.procs() + static_cast<int>(more.below(static_cast<std::uint64_t>(s.respawns)));
    const auto k = more.below(4);
    f.kind = k < 2 ? FaultKind::kill : (k == 2 ? FaultKind::hang : FaultKind::stall);
    f.when = static_cast<FaultWhen>(more.below(3));
    f.at_call = 1 + static_cast<int>(more.below(static_cast<std::uint64_t>(s.steps) + 12));
    f.stall_us = 1 + static_cast<std::int64_t>(more.below(3'000'000));
    s.faults.push_back(f);
  }
  return s;
}

RunReport run_schedule(const Schedule& s) {
  RunReport r;
  r.schedule = s;
  SimOptions so;
  SimWorld w(s.procs(), s.seed, s.faults, so);
  const int most = s.procs() + s.respawns;  // processes a run can ever have
  std::vector<ProcEnd> ends(static_cast<std::size_t>(most));
  std::vector<int> host_of;
  for (int p = 0; p < most; ++p) host_of.push_back(p % s.hosts);
  w.run([&](int proc, std::unique_ptr<FtComm> world) {
    GroupOptions o;
    o.hang_timeout = std::chrono::milliseconds(0);
    o.ulfm_timeout_s = -1;
    o.spares = s.spares;
    o.respawns = s.respawns;
    o.verbose = false;
    ProcEnd& e = ends.at(static_cast<std::size_t>(proc));
    const bool respawned = proc >= s.procs();
    if (respawned) w.start_counting(proc);
    ResilientGroup::Simulated sim{std::move(world), [&w](int r) { return w.gone(r); }, s.seed + 1, host_of, respawned};
    std::unique_ptr<ResilientGroup> gp;
    try {
      gp = std::make_unique<ResilientGroup>(std::move(sim), o);
    } catch (const std::exception&) {
      if (!respawned) throw;
      e.turned_away = true;  // it exits with an error, as ftcc-train does: its peers see it failed
      w.exit_abnormally(proc);
    }
    ResilientGroup& g = *gp;
    if (!respawned) w.start_counting(proc);
    JobOptions jo;
    jo.name = "ftcc-sim";
    jo.quiet = true;
    std::string broken;
    e.end = run_on_group(g, [&](ResilientGroup& g) {
      try {
        train(g, s, proc, e);
      } catch (const std::logic_error& x) {
        broken = x.what();  // an invariant of the body: reported as a violation below
        throw;
      }
    }, jo);
    if (!broken.empty()) w.violation("process " + std::to_string(proc) + ": " + broken);
    e.ended = true;
    e.trains = !g.is_spare();
    e.committed = g.committed_step();
    e.members = g.members();
    e.events = g.events();
  });
  r.violations = w.violations();
  r.spawned = w.procs() - s.procs();
  for (const auto& e : ends) r.turned_away += e.turned_away ? 1 : 0;
  r.trace = w.trace_hash();
  r.reached = w.reached();
  // Each hung peer costs at most its fence, each stall its length: nothing else may make a live
  // process wait (a wait with no end is a deadlock, which SimWorld reports).
  std::int64_t bound = 1'000'000;
  for (const auto& f : s.faults) bound += f.kind == FaultKind::stall ? f.stall_us : f.kind == FaultKind::hang ? so.hang_timeout_us : 0;
  if (w.longest_wait_us() > bound)
    r.violations.push_back("a live process waited " + std::to_string(w.longest_wait_us() / 1000) +
                           " ms in one call (the hung peers' fences plus the stalls: " + std::to_string(bound / 1000) + " ms)");
  if (r.violations.empty()) check(s, w, ends, r);
  for (int p = 0; p < w.procs(); ++p) {
    const ProcEnd& e = ends[static_cast<std::size_t>(p)];
    r.outcome += "  process " + std::to_string(p) + (p >= s.procs() ? " (respawned)" : "") + ": " +
                 (e.turned_away ? std::string("turned away (its hand-over failed), exited") : w.gone(p) ? std::string("gone")
                            : e.ended ? "status " + std::to_string(static_cast<int>(e.end.status)) + (e.trains ? ", trains" : ", spare") +
                                            ", step " + std::to_string(e.step) + ", members " + list(e.members) + ", " +
                                            std::to_string(e.events.size()) + " recoveries"
                                      : std::string("did not end")) +
                 "\n";
  }
  return r;
}

}  // namespace ftcc::recovery::sim
