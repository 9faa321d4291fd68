// recovery/simulation/sim_campaign.hpp: seeded simulated jobs of the recovery protocol and the
// invariants checked after each (the driver: tools/ftcc_sim.cpp; docs/recovery.md).
//
// A seed gives a Schedule (ranks, hot spares, steps, the faults and where they fire, an injected
// job-level error) and the interleaving (SimWorld's scheduler). Every simulated process runs the
// real ResilientGroup (its Simulated constructor) and run_on_group (recovery/run_job.hpp) with a
// training-shaped body: each step allgathers (step, state hash) on the training group, checks
// that every member is at the same step with the same state, and applies the step to its state
// (a hash chain); a recovery hook rolls every member forward to the most advanced state, as the
// data-parallel trainer does; hot spares wait in wait_as_spare() and take that state when they
// join. In half of the jobs the group may respawn (GroupOptions::respawns 1 or 2): places
// no spare is left for are filled by new simulated processes (FtComm::spawn_merged), which join
// through the real hand-over (recovery/respawn.cpp) and then train like a spare that joined; a
// new process the survivors turn away (the hand-over failed) ends without a part in the job.
// The invariants checked after the run (each failure is a violation naming the seed):
//  - no deadlock, no two members in different collective calls, no livelock (SimWorld);
//  - every process that was not killed ended its job, all with the same exit status, which is
//    0, or 4 when an injected error fired or every process that held the state was lost, or 3
//    (quorum lost: every survivor leaves) when the job spans several hosts;
//  - after 0: every survivor that trains is at the last step with the state of applying each step
//    exactly once (the hash chain of 0..steps-1), its last committed step, and the same members;
//    with no training survivor (hot spares alone), every process that trained had finished its
//    training loop before it was lost;
//  - every surviving process recorded the same recoveries (failed, survivors, joined ranks);
//  - a hot spare or new process joins at most once, and only those join; no more new processes
//    join than the respawns allowed;
//  - no live process waited in one call (a hot spare's wait aside) longer than the hung peers'
//    fences plus the stalls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ftcc/recovery/job_outcome.hpp"
#include "ftcc/recovery/simulation/sim_world.hpp"

namespace ftcc::recovery::sim {

struct Schedule {
  std::uint64_t seed = 0;
  int ranks = 2;   // training ranks
  int spares = 0;  // hot spares (the last processes)
  int respawns = 0;  // GroupOptions::respawns (new processes get the ids after the spares')
  int steps = 3;
  int hosts = 1;   // process p runs on host p % hosts (the quorum rule counts confirmed deaths per host)
  std::vector<SimFault> faults;
  int error_proc = -1;           // this process throws at error_step (-1: no injected error)
  std::int64_t error_step = -1;
  int procs() const { return ranks + spares; }  // at the start
  std::string describe() const;  // one line per item, for a replayed seed
};

Schedule schedule_of(std::uint64_t seed);

struct RunReport {
  Schedule schedule;
  std::vector<std::string> violations;  // empty: every invariant held
  std::uint64_t trace = 0;              // SimWorld::trace_hash
  std::vector<SimWorld::Cell> reached;  // (call, fault kind, phase) of each fault that fired
  ExitStatus status = ExitStatus::finished;  // the survivors' (when they agree)
  int survivors = 0;
  int recoveries = 0;  // events recorded by a survivor
  int spawned = 0;     // new processes the simulation started (respawns)
  int joined_new = 0;  // of them, those that joined the job (a survivor's events)
  int turned_away = 0; // of them, those whose hand-over failed
  std::string outcome;  // a line per process (for a replayed seed)
};

RunReport run_schedule(const Schedule& s);

}  // namespace ftcc::recovery::sim
