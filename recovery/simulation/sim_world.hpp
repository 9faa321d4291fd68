// recovery/simulation/sim_world.hpp: simulated processes under a seeded scheduler, with ULFM's
// semantics (recovery/ft_comm.hpp), for the deterministic simulation of the recovery protocol.
//
//   SimWorld w(5, seed, faults, {});
//   w.run([&](int proc, std::unique_ptr<FtComm> world) { ...ResilientGroup(Simulated{...})... });
//   w.violations(), w.trace_hash(), w.fired()
//
// Each process is a thread, but exactly one runs at a time: it runs until its next FtComm call,
// where it hands control back to the scheduler, which picks the next process to run with its
// seeded generator. Every blocking point of the protocol is such a call, so the same seed (and
// the same faults) gives the same interleaving, the same results and the same trace, whatever
// the machine's load. Time is virtual: each scheduling step advances it a little; it jumps
// forward when every live process waits for a timer (a stall's end, a hung process's fence).
//
// Faults fire at a process's n-th FtComm call (counted from start_counting()), in one of three phases: before the call, inside
// it (its contribution is in, the call has not completed: "between two messages"), or after it
// completed (before the caller sees the result). Kinds: kill (the process is gone: peers' ULFM
// calls exclude it, their other operations involving it fail), hang (it stops; peers see it
// alive until the heartbeat's fence, hang_timeout later, turns it into a death) and stall (it
// stops for a while and goes on). A killed or hung thread is unwound with SimKilled (not a
// std::exception, so no handler of the program catches it) when the run ends.
//
// ULFM model (what recovery/ft_comm.hpp states, made concrete):
//  - agree/shrink complete once every live member has entered; agree ANDs the live members'
//    flags (and, by a seeded choice made once per call, the flags of members that entered and
//    died since); failure_noticed is true when a dead member is not yet acknowledged, and the
//    call acknowledges it (the same answer on every survivor). A shrink whose member died inside
//    it may, by a seeded choice, fail with ProcessFailed on every survivor (they retry).
//  - allgather/split fail with ProcessFailed when a member is dead, and with Revoked once the
//    communicator is revoked. When a member dies inside one, each member that had entered either
//    completes (the dead one's part had arrived) or fails, by seeded choice: non-uniform.
//  - spawn (FtComm::spawn_merged) is an ordinary collective too: when it completes, it starts k
//    new processes, which run the same program with the merged communicator (the members first,
//    then the new processes) as their `world`; their ids follow the existing ones. A broadcast is
//    an allgather of which each member keeps the root's part.
//  - members must make the same sequence of collective calls on a communicator; a mismatch (one
//    in agree while another is in shrink) is a protocol violation, as is a deadlock (live
//    processes waiting and nothing left that could wake them).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ftcc/recovery/ft_comm.hpp"

namespace ftcc::recovery::sim {

struct SimKilled {};  // unwinds a simulated process that was killed or hung (see the top)

enum class Call : int { revoke, shrink, agree, allgather, split, spawn, kCount };
enum class FaultKind : int { kill, hang, stall, kCount };
enum class FaultWhen : int { before, inside, after, kCount };
const char* to_string(Call c);
const char* to_string(FaultKind k);
const char* to_string(FaultWhen w);

struct SimFault {
  int proc = 0;
  int at_call = 1;  // the victim's n-th FtComm call (1-based)
  FaultKind kind = FaultKind::kill;
  FaultWhen when = FaultWhen::before;
  std::int64_t stall_us = 0;  // for a stall
};

struct SimOptions {
  std::int64_t hang_timeout_us = 2'000'000;  // a hung process is fenced (dies) this long after it hung
  std::int64_t max_step_us = 200;            // virtual time a scheduling step may take
};

// The simple, seedable generator of the simulation (splitmix64): no library distribution, so a
// seed means the same schedule with any standard library.
class SimRng {
 public:
  explicit SimRng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  bool coin() { return (next() & 1) != 0; }

 private:
  std::uint64_t s_;
};

class SimWorld {
 public:
  using Program = std::function<void(int proc, std::unique_ptr<FtComm> world)>;
  SimWorld(int procs, std::uint64_t seed, std::vector<SimFault> faults, SimOptions options = {});
  ~SimWorld();
  SimWorld(const SimWorld&) = delete;
  SimWorld& operator=(const SimWorld&) = delete;

  // Runs program on every process until each has returned or is gone (or the run deadlocked).
  // An exception other than SimKilled leaving program is recorded as a violation. A process a
  // spawn started runs program too, with its id (>= the initial count) and the merged communicator.
  void run(const Program& program);

  int procs() const;  // started so far (the initial ones and those spawns started)
  bool gone(int proc) const;            // killed (or fenced after a hang)
  bool fault_fired(std::size_t i) const;  // faults[i] took effect
  const std::vector<std::string>& violations() const;
  // A hash of every scheduling decision and call result, in order: equal traces, equal runs.
  std::uint64_t trace_hash() const;
  std::uint64_t scheduling_steps() const;
  std::int64_t now_us() const;
  std::int64_t longest_wait_us() const;  // the longest a live process waited in one call (agree_polled aside)
  // The (call, kind, when) cells the faults of this run reached.
  using Cell = std::array<int, 3>;
  const std::vector<Cell>& reached() const;

  // Records a violation found by the program (an invariant it checks itself).
  void violation(const std::string& what);
  // Ends the calling process `proc` as a process that exits with an error does (its peers' ULFM
  // calls then see it failed); never returns. The campaign calls it in a new process the survivors
  // turned away, which ftcc-train ends with an error.
  [[noreturn]] void exit_abnormally(int proc);
  // Faults count this process's calls from here (the program calls it once its group is formed:
  // a death while the job starts fails the start, which is not the protocol's to recover).
  void start_counting(int proc);

  struct State;  // internals (sim_world.cpp)

 private:
  std::unique_ptr<State> s_;
};

}  // namespace ftcc::recovery::sim
