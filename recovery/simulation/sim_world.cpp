#include "ftcc/recovery/simulation/sim_world.hpp"

#include <algorithm>
#include <map>
#include <semaphore>
#include <string>
#include <thread>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/errors.hpp"

namespace ftcc::recovery::sim {

const char* to_string(Call c) {
  static const char* names[] = {"revoke", "shrink", "agree", "allgather", "split", "spawn"};
  return names[static_cast<int>(c)];
}
const char* to_string(FaultKind k) {
  static const char* names[] = {"kill", "hang", "stall"};
  return names[static_cast<int>(k)];
}
const char* to_string(FaultWhen w) {
  static const char* names[] = {"before", "inside", "after"};
  return names[static_cast<int>(w)];
}

namespace {

constexpr std::uint64_t kMaxSteps = 400'000;  // scheduling steps before a run counts as a livelock

bool is_ulfm(Call c) { return c == Call::agree || c == Call::shrink; }

struct Proc {
  enum class St { ready, blocked, stalled, hung, dead, done };
  int id = 0;
  St st = St::ready;
  std::binary_semaphore go{0};
  std::thread th;
  bool unwind = false;
  int calls = 0;
  bool counting = false;  // faults count calls from start_counting()
  std::int64_t wake_us = 0;  // stalled: when it goes on; hung: when the heartbeat fences it
};

struct Result {
  enum class Kind { pending, ok, failed, revoked } kind = Kind::pending;
  comm::Agreement agreement;
  std::vector<std::int64_t> data;  // allgather
  int new_comm = -1, new_rank = -1;  // shrink, split (-1: none)
  std::vector<int> kept, lost;       // shrink

  static Result of(Kind k) {
    Result r;
    r.kind = k;
    return r;
  }
};

struct Op {
  Call kind = Call::agree;
  std::vector<char> entered, died_inside;
  std::vector<unsigned> flags;
  std::vector<std::vector<std::int64_t>> words;
  std::vector<int> color, key, spawn;
  std::vector<Result> result;
  bool done = false;
};

struct CommState {
  int id = 0;
  std::vector<int> procs;  // member rank -> process
  bool revoked = false;
  std::vector<char> acked;          // a member's death acknowledged (by an agreement)
  // Each member's next call, in two spaces: ULFM's agreements and shrinks are matched among
  // themselves (a revoked or broken ordinary collective never completes, so a process that left
  // one early and a process that never entered it still meet in the next agreement); ordinary
  // collectives among themselves. Keys of ops: seq * 2 + (ULFM ? 1 : 0).
  std::vector<std::uint64_t> seq, ulfm_seq;
  std::map<std::uint64_t, Op> ops;
};

struct Contribution {
  unsigned flag = 0;
  const std::int64_t* words = nullptr;
  std::size_t n = 0;
  int color = 0, key = 0;
  int spawn = 0;           // new processes (spawn)
  bool unbounded = false;  // a hot spare's wait: as long as the run, by design
};

}  // namespace

struct SimWorld::State {
  SimOptions opt;
  SimRng rng;
  std::vector<SimFault> faults;
  std::vector<char> fired;
  std::vector<std::unique_ptr<Proc>> procs;
  std::vector<std::unique_ptr<CommState>> comms;
  std::binary_semaphore sched{0};
  std::int64_t now = 0;
  std::uint64_t trace = 1469598103934665603ULL;
  std::uint64_t steps = 0;
  std::vector<std::string> violations;
  bool stop = false;
  const Program* program = nullptr;  // run()'s, for the processes a spawn starts
  std::int64_t longest_wait = 0;
  std::vector<Cell> reached;

  State(std::uint64_t seed, std::vector<SimFault> f, SimOptions o) : opt(o), rng(seed), faults(std::move(f)) {
    fired.assign(faults.size(), 0);
  }
  void mix(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) trace = (trace ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ULL;
  }
  void violation(const std::string& what) {
    violations.push_back(what);
    stop = true;
  }
  void start_counting(int proc) {
    procs[static_cast<std::size_t>(proc)]->calls = 0;
    procs[static_cast<std::size_t>(proc)]->counting = true;
  }

  // --- the process side (runs on the process's thread, which holds the baton) ---
  void yield(Proc& p) {
    sched.release();
    p.go.acquire();
    if (p.unwind) throw SimKilled{};
  }
  [[noreturn]] void park(Proc& p) {  // a dead or hung process never runs again
    for (;;) yield(p);
  }
  void die(Proc& p) {
    p.st = Proc::St::dead;
    mix(0xdead0000ULL + static_cast<std::uint64_t>(p.id));
    on_death(p.id);
  }
  // The faults planned for this call and phase: a kill or hang never returns.
  void fault_point(Proc& p, Call call, FaultWhen when) {
    for (std::size_t i = 0; i < faults.size(); ++i) {
      const SimFault& f = faults[i];
      if (fired[i] || !p.counting || f.proc != p.id || f.at_call != p.calls || f.when != when) continue;
      fired[i] = 1;
      reached.push_back({static_cast<int>(call), static_cast<int>(f.kind), static_cast<int>(when)});
      mix(0xfa000000ULL + i);
      switch (f.kind) {
        case FaultKind::kill:
          die(p);
          park(p);
        case FaultKind::hang:
          p.st = Proc::St::hung;
          p.wake_us = now + opt.hang_timeout_us;
          park(p);
        case FaultKind::stall:
          p.st = Proc::St::stalled;
          p.wake_us = now + f.stall_us;
          yield(p);
          break;
        default:
          break;
      }
    }
  }

  Result call(Proc& p, int comm_id, int m, Call kind, const Contribution& in) {
    ++p.calls;
    fault_point(p, kind, FaultWhen::before);
    p.st = Proc::St::ready;
    yield(p);  // a scheduling point before every call
    CommState& c = *comms[static_cast<std::size_t>(comm_id)];
    mix((static_cast<std::uint64_t>(p.id) << 32) ^ (static_cast<std::uint64_t>(kind) << 24) ^ static_cast<std::uint64_t>(comm_id));
    if (kind == Call::revoke) {
      revoke(c);
      fault_point(p, kind, FaultWhen::inside);
      fault_point(p, kind, FaultWhen::after);
      return Result::of(Result::Kind::ok);
    }
    const std::uint64_t seq = is_ulfm(kind) ? c.ulfm_seq[static_cast<std::size_t>(m)]++ : c.seq[static_cast<std::size_t>(m)]++;
    Op& op = op_of(c, seq * 2 + (is_ulfm(kind) ? 1 : 0), kind);
    // A different call from a live member is a protocol bug (they would wait for each other
    // forever); an ordinary collective that cannot complete anyway (revoked, a member dead) is not.
    if (op.kind != kind && !live_entrant(c, op)) op.kind = kind;  // only the dead made the other call
    if (op.kind != kind && (is_ulfm(kind) || (!c.revoked && !any_dead(c)))) {
      violation("process " + std::to_string(p.id) + " calls " + to_string(kind) + " as collective " + std::to_string(seq) +
                " of communicator " + std::to_string(c.id) + ", where another member calls " + to_string(op.kind) +
                ": they would wait in different calls forever");
      park(p);
    }
    const auto mi = static_cast<std::size_t>(m);
    op.entered[mi] = 1;
    op.flags[mi] = in.flag;
    if (in.words) op.words[mi].assign(in.words, in.words + in.n);
    op.color[mi] = in.color;
    op.key[mi] = in.key;
    op.spawn[mi] = in.spawn;
    if (!is_ulfm(kind) && c.revoked) {
      op.result[mi].kind = Result::Kind::revoked;
    } else if (!is_ulfm(kind) && any_dead(c)) {
      op.result[mi].kind = Result::Kind::failed;
    } else {
      fault_point(p, kind, FaultWhen::inside);  // entered, not complete: a kill here dies inside
      try_complete(c, op);
    }
    const std::int64_t since = now;
    while (op.result[mi].kind == Result::Kind::pending) {
      p.st = Proc::St::blocked;
      yield(p);
    }
    if (!in.unbounded) longest_wait = std::max(longest_wait, now - since);
    Result r = op.result[mi];
    mix(static_cast<std::uint64_t>(r.kind) * 131 + r.agreement.flag * 7 + (r.agreement.failure_noticed ? 3 : 0) +
        static_cast<std::uint64_t>(r.new_rank + 1) * 1009);
    fault_point(p, kind, FaultWhen::after);
    return r;
  }

  Op& op_of(CommState& c, std::uint64_t seq, Call kind) {
    auto [it, fresh] = c.ops.try_emplace(seq);
    Op& op = it->second;
    if (fresh) {
      const std::size_t n = c.procs.size();
      op.kind = kind;
      op.entered.assign(n, 0);
      op.died_inside.assign(n, 0);
      op.flags.assign(n, 0);
      op.words.assign(n, {});
      op.color.assign(n, 0);
      op.key.assign(n, 0);
      op.spawn.assign(n, 0);
      op.result.assign(n, Result{});
    }
    return op;
  }

  bool dead(int proc) const { return procs[static_cast<std::size_t>(proc)]->st == Proc::St::dead; }
  bool live_entrant(const CommState& c, const Op& op) const {
    for (std::size_t i = 0; i < c.procs.size(); ++i)
      if (op.entered[i] && !dead(c.procs[i])) return true;
    return false;
  }
  bool any_dead(const CommState& c) const {
    return std::any_of(c.procs.begin(), c.procs.end(), [&](int q) { return dead(q); });
  }
  void wake(const CommState& c, const Op& op) {
    for (std::size_t i = 0; i < c.procs.size(); ++i) {
      Proc& q = *procs[static_cast<std::size_t>(c.procs[i])];
      if (op.result[i].kind != Result::Kind::pending && q.st == Proc::St::blocked) q.st = Proc::St::ready;
    }
  }

  int new_comm(std::vector<int> members) {
    auto c = std::make_unique<CommState>();
    c->id = static_cast<int>(comms.size());
    c->procs = std::move(members);
    c->acked.assign(c->procs.size(), 0);
    c->seq.assign(c->procs.size(), 0);
    c->ulfm_seq.assign(c->procs.size(), 0);
    comms.push_back(std::move(c));
    return comms.back()->id;
  }

  void try_complete(CommState& c, Op& op) {
    if (op.done) return;
    const std::size_t n = c.procs.size();
    for (std::size_t i = 0; i < n; ++i)
      if (!op.entered[i] && !dead(c.procs[i])) return;  // a live member has not entered yet
    if (is_ulfm(op.kind)) return complete_ulfm(c, op);
    for (std::size_t i = 0; i < n; ++i)
      if (dead(c.procs[i])) return;  // resolved by on_death
    complete_ordinary(c, op);
  }

  // An allgather or split every member entered (a dead one too: its part had arrived).
  void complete_ordinary(CommState& c, Op& op) {
    const std::size_t n = c.procs.size();
    op.done = true;
    if (op.kind == Call::allgather) {
      std::vector<std::int64_t> all;
      for (std::size_t i = 0; i < n; ++i) all.insert(all.end(), op.words[i].begin(), op.words[i].end());
      for (std::size_t i = 0; i < n; ++i) {
        op.result[i].kind = Result::Kind::ok;
        op.result[i].data = all;
      }
    } else if (op.kind == Call::spawn) {  // k new processes, after the members (rank 0's k: MPI's root)
      std::vector<int> ps = c.procs;
      const int k = op.spawn[0];
      for (int i = 0; i < k; ++i) ps.push_back(add_process());
      const int id = new_comm(ps);
      for (std::size_t i = 0; i < n; ++i) {
        op.result[i].kind = Result::Kind::ok;
        op.result[i].new_comm = id;
        op.result[i].new_rank = static_cast<int>(i);
      }
      for (int i = 0; i < k; ++i) start(*procs[static_cast<std::size_t>(ps[n + static_cast<std::size_t>(i)])], id, static_cast<int>(n) + i);
    } else {  // split: one communicator per color, ordered by (key, old rank)
      std::map<int, std::vector<std::pair<int, int>>> by_color;
      for (std::size_t i = 0; i < n; ++i)
        if (op.color[i] >= 0) by_color[op.color[i]].push_back({op.key[i], static_cast<int>(i)});
      for (std::size_t i = 0; i < n; ++i) op.result[i].kind = Result::Kind::ok;
      for (auto& [color, members] : by_color) {
        std::sort(members.begin(), members.end());
        std::vector<int> ps;
        for (auto& m : members) ps.push_back(c.procs[static_cast<std::size_t>(m.second)]);
        const int id = new_comm(ps);
        for (std::size_t r = 0; r < members.size(); ++r) {
          Result& res = op.result[static_cast<std::size_t>(members[r].second)];
          res.new_comm = id;
          res.new_rank = static_cast<int>(r);
        }
      }
    }
    wake(c, op);
  }

  void complete_ulfm(CommState& c, Op& op) {
    op.done = true;
    const std::size_t n = c.procs.size();
    bool died_inside = false;
    for (std::size_t i = 0; i < n; ++i) died_inside = died_inside || op.died_inside[i];
    if (op.kind == Call::agree) {
      const bool count_dead = died_inside && rng.coin();
      unsigned flag = ~0u;
      bool noticed = false;
      for (std::size_t i = 0; i < n; ++i) {
        if (!dead(c.procs[i]) || (count_dead && op.died_inside[i])) flag &= op.flags[i];
        if (dead(c.procs[i]) && !c.acked[i]) noticed = true;
      }
      for (std::size_t i = 0; i < n; ++i)
        if (dead(c.procs[i])) c.acked[i] = 1;
      for (std::size_t i = 0; i < n; ++i) {
        if (dead(c.procs[i])) continue;
        op.result[i].kind = Result::Kind::ok;
        op.result[i].agreement = {flag, noticed};
      }
    } else if (died_inside && rng.coin()) {  // a shrink interrupted by a death: every survivor retries
      for (std::size_t i = 0; i < n; ++i)
        if (!dead(c.procs[i])) op.result[i].kind = Result::Kind::failed;
    } else {
      std::vector<int> kept, lost, ps;
      for (std::size_t i = 0; i < n; ++i) {
        if (dead(c.procs[i])) {
          lost.push_back(static_cast<int>(i));
        } else {
          kept.push_back(static_cast<int>(i));
          ps.push_back(c.procs[i]);
        }
      }
      const int id = new_comm(ps);
      for (std::size_t k = 0; k < kept.size(); ++k) {
        Result& r = op.result[static_cast<std::size_t>(kept[k])];
        r.kind = Result::Kind::ok;
        r.new_comm = id;
        r.new_rank = static_cast<int>(k);
        r.kept = kept;
        r.lost = lost;
      }
    }
    wake(c, op);
  }

  void revoke(CommState& c) {
    c.revoked = true;
    for (auto& [seq, op] : c.ops) {
      if (op.done || is_ulfm(op.kind)) continue;
      op.done = true;
      for (std::size_t i = 0; i < c.procs.size(); ++i)
        if (op.result[i].kind == Result::Kind::pending) op.result[i].kind = Result::Kind::revoked;
      wake(c, op);
    }
  }

  void on_death(int proc) {
    for (std::size_t ci = 0; ci < comms.size(); ++ci) {  // by index: a completion may add communicators
      CommState& c = *comms[ci];
      const auto at = std::find(c.procs.begin(), c.procs.end(), proc);
      if (at == c.procs.end()) continue;
      const auto d = static_cast<std::size_t>(at - c.procs.begin());
      for (auto& [seq, op] : c.ops) {
        if (op.done) continue;
        if (op.entered[d]) op.died_inside[d] = 1;
        if (is_ulfm(op.kind)) {
          try_complete(c, op);
          continue;
        }
        // An ordinary collective: the members that entered complete only if every part had
        // arrived (everyone entered) and the seeded coin says this one got it; the rest fail.
        bool all_in = true;
        for (std::size_t i = 0; i < c.procs.size(); ++i) all_in = all_in && op.entered[i];
        if (all_in) complete_ordinary(c, op);
        op.done = true;
        for (std::size_t i = 0; i < c.procs.size(); ++i) {
          Result& r = op.result[i];
          if (r.kind == Result::Kind::pending || (all_in && r.kind == Result::Kind::ok && !rng.coin()))
            r = Result::of(Result::Kind::failed);
        }
        wake(c, op);
      }
    }
  }

  int add_process() {
    procs.push_back(std::make_unique<Proc>());
    procs.back()->id = static_cast<int>(procs.size()) - 1;
    mix(0x5ba70000ULL + static_cast<std::uint64_t>(procs.back()->id));
    return procs.back()->id;
  }
  // The process's thread: it waits for its first turn, then runs the program on its communicator.
  void start(Proc& proc, int comm_id, int member);

  // --- the scheduler side (the thread that called run) ---
  void fire_timers() {
    for (std::size_t i = 0; i < procs.size(); ++i) {  // by index: a death may complete a spawn, which adds processes
      Proc& p = *procs[i];
      if (p.st == Proc::St::stalled && p.wake_us <= now) p.st = Proc::St::ready;
      if (p.st == Proc::St::hung && p.wake_us <= now) die(p);  // fenced by the heartbeat
    }
  }
  std::int64_t next_timer() const {
    std::int64_t t = -1;
    for (const auto& p : procs)
      if (p->st == Proc::St::stalled || p->st == Proc::St::hung) t = t < 0 ? p->wake_us : std::min(t, p->wake_us);
    return t;
  }
  std::string describe_waits() const {
    std::string out;
    for (const auto& cp : comms)
      for (const auto& [seq, op] : cp->ops)
        if (!op.done)
          for (std::size_t i = 0; i < cp->procs.size(); ++i)
            if (op.entered[i] && op.result[i].kind == Result::Kind::pending && !dead(cp->procs[i]))
              out += " process " + std::to_string(cp->procs[i]) + " in " + to_string(op.kind) + " #" +
                     std::to_string(seq / 2) + " of communicator " + std::to_string(cp->id) + ";";
    return out;
  }
};

namespace {

class SimFtComm final : public FtComm {
 public:
  SimFtComm(SimWorld::State* s, int comm_id, int member) : s_(s), comm_(comm_id), member_(member) {}
  int rank() const override { return member_; }
  int size() const override { return static_cast<int>(state().procs.size()); }
  void revoke() override { (void)s_->call(me(), comm_, member_, Call::revoke, {}); }
  FtShrunk shrink() override {
    const Result r = s_->call(me(), comm_, member_, Call::shrink, {});
    if (r.kind != Result::Kind::ok) throw comm::ProcessFailed("MPIX_Comm_shrink (simulated)", failed_ranks(), 0);
    return {std::make_unique<SimFtComm>(s_, r.new_comm, r.new_rank), r.kept, r.lost};
  }
  comm::Agreement agree(unsigned flag) override { return agree_call(flag, /*unbounded=*/false); }
  // The polled form waits without the ULFM deadline (a spare's wait); idle runs once first, as
  // the MPI form runs it between polls.
  comm::Agreement agree_polled(unsigned flag, const std::function<void()>& idle) override {
    idle();
    return agree_call(flag, /*unbounded=*/true);
  }
  void allgather(const std::int64_t* mine, std::int64_t* all, std::size_t words) override {
    Contribution in;
    in.words = mine;
    in.n = words;
    const Result r = s_->call(me(), comm_, member_, Call::allgather, in);
    throw_if_failed(r, "allgather (simulated)");
    FTCC_CHECK_T(ftcc::Error, r.data.size() == words * static_cast<std::size_t>(size()))
        << "simulated allgather: members gave different sizes";
    std::copy(r.data.begin(), r.data.end(), all);
  }
  std::unique_ptr<FtComm> split(int color, int key) override {
    Contribution in;
    in.color = color;
    in.key = key;
    const Result r = s_->call(me(), comm_, member_, Call::split, in);
    throw_if_failed(r, "MPI_Comm_split (simulated)");
    if (r.new_comm < 0) return nullptr;
    return std::make_unique<SimFtComm>(s_, r.new_comm, r.new_rank);
  }
  void broadcast(std::int64_t* words, std::size_t n, int root) override {
    std::vector<std::int64_t> mine(words, words + n), all(n * static_cast<std::size_t>(size()));
    allgather(mine.data(), all.data(), n);
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(n * static_cast<std::size_t>(root)), n, words);
  }
  std::unique_ptr<FtComm> spawn_merged(int k) override {
    Contribution in;
    in.spawn = k;
    const Result r = s_->call(me(), comm_, member_, Call::spawn, in);
    throw_if_failed(r, "MPI_Comm_spawn (simulated)");
    return std::make_unique<SimFtComm>(s_, r.new_comm, r.new_rank);
  }
  comm::Communicator* communicator() override { return nullptr; }

 private:
  comm::Agreement agree_call(unsigned flag, bool unbounded) {
    Contribution in;
    in.flag = flag;
    in.unbounded = unbounded;
    return s_->call(me(), comm_, member_, Call::agree, in).agreement;
  }
  const CommState& state() const { return *s_->comms[static_cast<std::size_t>(comm_)]; }
  Proc& me() const {
    return *s_->procs[static_cast<std::size_t>(state().procs[static_cast<std::size_t>(member_)])];
  }
  std::vector<int> failed_ranks() const {
    std::vector<int> out;
    for (std::size_t i = 0; i < state().procs.size(); ++i)
      if (s_->dead(state().procs[i])) out.push_back(static_cast<int>(i));
    return out;
  }
  void throw_if_failed(const Result& r, const char* op) const {
    if (r.kind == Result::Kind::revoked) throw comm::Revoked(op, 0);
    if (r.kind == Result::Kind::failed) throw comm::ProcessFailed(op, failed_ranks(), 0);
  }
  SimWorld::State* s_;
  int comm_, member_;
};

}  // namespace

void SimWorld::State::start(Proc& proc, int comm_id, int member) {
  Proc* p = &proc;
  p->th = std::thread([this, p, comm_id, member] {
    p->go.acquire();
    try {
      if (!p->unwind) (*program)(p->id, std::make_unique<SimFtComm>(this, comm_id, member));
    } catch (const SimKilled&) {
    } catch (const std::exception& e) {
      violations.push_back("process " + std::to_string(p->id) + ": uncaught exception: " + e.what());
      stop = true;
    }
    if (p->st != Proc::St::dead) p->st = Proc::St::done;
    sched.release();
  });
}

SimWorld::SimWorld(int procs, std::uint64_t seed, std::vector<SimFault> faults, SimOptions options)
    : s_(std::make_unique<State>(seed, std::move(faults), options)) {
  FTCC_CHECK(procs >= 1) << "SimWorld: at least one process";
  for (int i = 0; i < procs; ++i) {
    s_->procs.push_back(std::make_unique<Proc>());
    s_->procs.back()->id = i;
  }
  std::vector<int> all(static_cast<std::size_t>(procs));
  for (int i = 0; i < procs; ++i) all[static_cast<std::size_t>(i)] = i;
  s_->new_comm(all);
}

SimWorld::~SimWorld() {
  for (auto& p : s_->procs)
    if (p->th.joinable()) p->th.join();
}

void SimWorld::run(const Program& program) {
  State& s = *s_;
  s.program = &program;
  for (auto& p : s.procs) s.start(*p, 0, p->id);
  while (!s.stop) {
    s.fire_timers();
    std::vector<Proc*> ready;
    for (auto& p : s.procs)
      if (p->st == Proc::St::ready) ready.push_back(p.get());
    if (ready.empty()) {
      const std::int64_t t = s.next_timer();
      if (t >= 0) {
        s.now = std::max(s.now, t);
        continue;
      }
      const bool all_over = std::all_of(s.procs.begin(), s.procs.end(), [](const auto& p) {
        return p->st == Proc::St::done || p->st == Proc::St::dead;
      });
      if (!all_over) s.violation("deadlock: live processes wait and nothing can wake them:" + s.describe_waits());
      break;
    }
    Proc* p = ready[s.rng.below(ready.size())];
    s.mix(static_cast<std::uint64_t>(p->id));
    s.now += static_cast<std::int64_t>(s.rng.below(static_cast<std::uint64_t>(s.opt.max_step_us) + 1));
    if (++s.steps > kMaxSteps) {
      s.violation("no end after " + std::to_string(kMaxSteps) + " scheduling steps (a livelock)");
      break;
    }
    p->go.release();
    s.sched.acquire();
  }
  for (auto& p : s.procs) {  // unwind whatever is still parked or waiting, one at a time
    if (p->st == Proc::St::done) continue;
    p->unwind = true;
    p->go.release();
    s.sched.acquire();
  }
  for (auto& p : s.procs) p->th.join();
}

int SimWorld::procs() const { return static_cast<int>(s_->procs.size()); }
bool SimWorld::gone(int proc) const { return s_->dead(proc); }
bool SimWorld::fault_fired(std::size_t i) const { return s_->fired.at(i) != 0; }
const std::vector<std::string>& SimWorld::violations() const { return s_->violations; }
std::uint64_t SimWorld::trace_hash() const { return s_->trace; }
std::uint64_t SimWorld::scheduling_steps() const { return s_->steps; }
std::int64_t SimWorld::now_us() const { return s_->now; }
std::int64_t SimWorld::longest_wait_us() const { return s_->longest_wait; }
const std::vector<SimWorld::Cell>& SimWorld::reached() const { return s_->reached; }
void SimWorld::violation(const std::string& what) { s_->violation(what); }
void SimWorld::start_counting(int proc) { s_->start_counting(proc); }
void SimWorld::exit_abnormally(int proc) {
  Proc& p = *s_->procs.at(static_cast<std::size_t>(proc));
  s_->die(p);
  s_->park(p);
}

}  // namespace ftcc::recovery::sim
