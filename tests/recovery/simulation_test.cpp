// The simulator of the recovery protocol (recovery/simulation/): its ULFM model keeps the
// semantics the protocol relies on, it reports the bugs it exists to find (a deadlock, two
// processes in different calls), and a seed replays exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "ftcc/comm/errors.hpp"
#include "ftcc/recovery/simulation/sim_campaign.hpp"
#include "ftcc/recovery/simulation/sim_world.hpp"

namespace ftcc::recovery::sim {
namespace {

bool mentions(const std::vector<std::string>& v, const std::string& what) {
  for (const auto& s : v)
    if (s.find(what) != std::string::npos) return true;
  return false;
}

TEST(SimWorld, AgreeIsTheAndOfEveryFlagOnEveryProcess) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SimWorld w(4, seed, {});
    std::vector<unsigned> got(4, 99);
    w.run([&](int p, std::unique_ptr<FtComm> c) { got[static_cast<std::size_t>(p)] = c->agree(p == 2 ? 1u : 3u).flag; });
    EXPECT_TRUE(w.violations().empty());
    for (unsigned g : got) EXPECT_EQ(g, 1u) << "seed " << seed;
  }
}

TEST(SimWorld, AKilledMemberIsNoticedOnceByEverySurvivorAndShrinkAgrees) {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    // Process 1 dies before its first call.
    SimWorld w(4, seed, {SimFault{1, 1, FaultKind::kill, FaultWhen::before, 0}});
    std::vector<std::vector<int>> lost(4);
    std::vector<int> noticed(4, -1), again(4, -1), sizes(4, -1);
    w.run([&](int p, std::unique_ptr<FtComm> c) {
      w.start_counting(p);
      const auto a = c->agree(1);
      noticed[static_cast<std::size_t>(p)] = a.failure_noticed;
      again[static_cast<std::size_t>(p)] = c->agree(1).failure_noticed;  // acknowledged: not again
      FtShrunk s = c->shrink();
      lost[static_cast<std::size_t>(p)] = s.lost;
      sizes[static_cast<std::size_t>(p)] = s.comm->size();
    });
    EXPECT_TRUE(w.violations().empty()) << w.violations().front();
    EXPECT_TRUE(w.gone(1));
    for (int p : {0, 2, 3}) {
      EXPECT_EQ(noticed[static_cast<std::size_t>(p)], 1) << "seed " << seed << " process " << p;
      EXPECT_EQ(again[static_cast<std::size_t>(p)], 0) << "seed " << seed << " process " << p;
      EXPECT_EQ(lost[static_cast<std::size_t>(p)], std::vector<int>{1});
      EXPECT_EQ(sizes[static_cast<std::size_t>(p)], 3);
    }
  }
}

TEST(SimWorld, RevokeFailsAPendingAllgatherButNotAnAgreement) {
  SimWorld w(3, 7, {});
  std::atomic<int> revoked{0};
  std::vector<unsigned> flags(3, 0);
  w.run([&](int p, std::unique_ptr<FtComm> c) {
    if (p == 0) {
      c->revoke();
    } else {
      std::int64_t mine = p, all[3];
      try {
        c->allgather(&mine, all, 1);  // can never complete: process 0 revokes instead
      } catch (const comm::Revoked&) {
        ++revoked;
      }
    }
    flags[static_cast<std::size_t>(p)] = c->agree(1).flag;
  });
  EXPECT_TRUE(w.violations().empty());
  EXPECT_EQ(revoked.load(), 2);
  EXPECT_EQ(flags, (std::vector<unsigned>{1, 1, 1}));
}

TEST(SimWorld, TwoLiveProcessesInDifferentCallsAreAViolation) {
  SimWorld w(2, 3, {});
  w.run([&](int p, std::unique_ptr<FtComm> c) {
    if (p == 0) (void)c->agree(1);
    else (void)c->shrink();
  });
  ASSERT_FALSE(w.violations().empty());
  EXPECT_TRUE(mentions(w.violations(), "different calls")) << w.violations().front();
}

TEST(SimWorld, AWaitNothingCanEndIsADeadlock) {
  SimWorld w(2, 3, {});
  w.run([&](int p, std::unique_ptr<FtComm> c) {
    if (p == 0) (void)c->agree(1);  // process 1 returns without ever joining it
  });
  ASSERT_FALSE(w.violations().empty());
  EXPECT_TRUE(mentions(w.violations(), "deadlock")) << w.violations().front();
}

TEST(SimWorld, AHungProcessIsFencedAfterTheHangTimeout) {
  SimOptions o;
  o.hang_timeout_us = 5'000'000;
  SimWorld w(3, 11, {SimFault{2, 1, FaultKind::hang, FaultWhen::before, 0}}, o);
  std::vector<int> noticed(3, -1);
  w.run([&](int p, std::unique_ptr<FtComm> c) {
    w.start_counting(p);
    noticed[static_cast<std::size_t>(p)] = c->agree(1).failure_noticed;
  });
  EXPECT_TRUE(w.violations().empty());
  EXPECT_TRUE(w.gone(2));
  EXPECT_EQ(noticed[0], 1);
  EXPECT_EQ(noticed[1], 1);
  EXPECT_GE(w.now_us(), o.hang_timeout_us);
}

// A spawn starts new processes that run the same program with the merged communicator: the
// members keep their ranks, the new processes follow; a broadcast gives every member the root's words.
TEST(SimWorld, SpawnStartsProcessesOnTheMergedCommunicator) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SimWorld w(3, seed, {});
    std::vector<int> rank(5, -1), size(5, -1);
    std::vector<std::int64_t> got(5, -1);
    w.run([&](int p, std::unique_ptr<FtComm> c) {
      std::unique_ptr<FtComm> m = p < 3 ? c->spawn_merged(2) : std::move(c);
      rank[static_cast<std::size_t>(p)] = m->rank();
      size[static_cast<std::size_t>(p)] = m->size();
      std::int64_t words[2] = {p == 0 ? 42 : -1, p == 0 ? 7 : -1};
      m->broadcast(words, 2, 0);
      got[static_cast<std::size_t>(p)] = words[0] * 100 + words[1];
    });
    EXPECT_TRUE(w.violations().empty()) << w.violations().front();
    EXPECT_EQ(w.procs(), 5);
    EXPECT_EQ(rank, (std::vector<int>{0, 1, 2, 3, 4})) << "seed " << seed;
    EXPECT_EQ(size, std::vector<int>(5, 5));
    EXPECT_EQ(got, std::vector<std::int64_t>(5, 4207));
  }
}

// A member killed before the spawn: it fails on every member (the dead one's part never came) and
// starts nobody.
TEST(SimWorld, ASpawnWithADeadMemberFails) {
  SimWorld w(3, 5, {SimFault{2, 1, FaultKind::kill, FaultWhen::before, 0}});
  std::atomic<int> failed{0};
  w.run([&](int p, std::unique_ptr<FtComm> c) {
    w.start_counting(p);
    try {
      (void)c->spawn_merged(1);
    } catch (const comm::ProcessFailed&) {
      ++failed;
    }
  });
  EXPECT_TRUE(w.violations().empty());
  EXPECT_EQ(failed.load(), 2);
  EXPECT_EQ(w.procs(), 3);
}

// A process that exits with an error is a failure its peers' agreement notices.
TEST(SimWorld, AnAbnormalExitIsAFailure) {
  SimWorld w(3, 9, {});
  std::vector<int> noticed(3, -1);
  w.run([&](int p, std::unique_ptr<FtComm> c) {
    if (p == 1) w.exit_abnormally(p);
    noticed[static_cast<std::size_t>(p)] = c->agree(1).failure_noticed;
  });
  EXPECT_TRUE(w.violations().empty());
  EXPECT_TRUE(w.gone(1));
  EXPECT_EQ(noticed[0], 1);
  EXPECT_EQ(noticed[2], 1);
}

TEST(SimCampaign, ASeedReplaysTheSameRun) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const Schedule s = schedule_of(seed);
    const RunReport a = run_schedule(s), b = run_schedule(s);
    ASSERT_EQ(a.trace, b.trace) << "seed " << seed;
    ASSERT_EQ(a.outcome, b.outcome) << "seed " << seed;
    ASSERT_EQ(a.violations, b.violations) << "seed " << seed;
  }
}

TEST(SimCampaign, SchedulesDifferAndRecoverToo) {
  int recovered = 0, with_spares = 0, failed_jobs = 0, joined_new = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const RunReport r = run_schedule(schedule_of(seed));
    EXPECT_TRUE(r.violations.empty()) << r.schedule.describe() << r.violations.front();
    recovered += r.recoveries > 0;
    with_spares += r.schedule.spares > 0 && r.recoveries > 0;
    failed_jobs += r.status == ExitStatus::job_error;
    joined_new += r.joined_new;
  }
  // The campaign reaches the protocol's paths, counted (not assumed): recoveries, heals, job
  // errors, respawned processes that joined.
  EXPECT_GT(recovered, 50);
  EXPECT_GT(with_spares, 20);
  EXPECT_GT(failed_jobs, 5);
  EXPECT_GT(joined_new, 10);
}

}  // namespace
}  // namespace ftcc::recovery::sim
