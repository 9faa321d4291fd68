// Multi-rank recovery tests with real processes really killed (SIGKILL), stopped (SIGSTOP),
// exited without MPI_Finalize, or delayed. Each TEST runs under its own mpirun with the rank
// count and --ftcc-expect-killed given in tests/recovery/meson.build.
//
// Every test runs the same loop: at each step every rank contributes f(original rank, step) to
// an allreduce (or receives a broadcast) run through ResilientGroup::run, which recovers and
// retries on the survivors. Each rank computes the expected result from the group's current
// members, so any lost, doubled or stale contribution fails the check.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/heartbeat.hpp"
#include "ftcc/recovery/process_state.hpp"
#include "ftcc/recovery/resilient_group.hpp"

namespace fr = ftcc::recovery;
namespace fc = ftcc::comm;
using namespace std::chrono_literals;

namespace {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

enum class Op { ring, tree, rhd, broadcast };

struct Plan {
  std::vector<std::string> faults;
  int steps = 12;
  Op op = Op::ring;
  std::size_t count = 4099;  // several ring segments with the small segment size below
  std::chrono::milliseconds hang_timeout{0};
  double ulfm_timeout_s = 0;
};

struct Outcome {
  int final_size = 0;
  int skipped = 0;  // steps the group finished while this rank was one behind (at most 1 per failure)
  std::vector<fr::RecoveryEvent> events;
  double wall_s = 0;
};

Outcome run_plan(const Plan& plan) {
  fr::GroupOptions opt;
  opt.faults = fr::parse_fault_specs(plan.faults);
  opt.hang_timeout = plan.hang_timeout;
  opt.comm_timeout_s = 60;
  opt.ulfm_timeout_s = plan.ulfm_timeout_s;
  fr::ResilientGroup g(MPI_COMM_WORLD, opt);
  // A hook that communicates, as real ones do (state re-sync): phase=hooks faults land in a
  // protocol whose hooks are busy on the new group.
  g.add_recovery_hook([](fr::ResilientGroup& grp, const fr::RecoveryEvent& ev) {
    std::int64_t n = 1;
    fc::allreduce(grp.comm(), fc::kInPlace, &n, 1, fc::DType::i64, fc::ReduceOp::sum);
    ASSERT_EQ(n, ev.new_size);
  });
  const auto t0 = std::chrono::steady_clock::now();
  static std::vector<double> buf;  // static: see docs/collectives.md on abandoned sends
  buf.assign(plan.count, 0.0);
  int out_skipped = 0;
  for (int step = 0; step < plan.steps; ++step) {
    g.begin_step(step);
    const bool ran = g.run(step, [&](fc::Communicator& c) {
      const int me = g.original_rank();
      if (plan.op == Op::broadcast) {
        const int root = step % c.size();
        const int root_orig = g.members()[root];
        for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = c.rank() == root ? root_orig * 1000.0 + step + i : -1.0;
        fc::BroadcastOptions bo;
        bo.segment_bytes = 1024;
        fc::broadcast(c, buf.data(), buf.size(), fc::DType::f64, root, bo);
        for (std::size_t i = 0; i < buf.size(); i += 97)
          ASSERT_EQ(buf[i], root_orig * 1000.0 + step + i) << "step " << step << " i " << i;
        return;
      }
      // Integers in doubles: sums are exact whatever the order, so the check is exact.
      for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = (me + 1) * 10.0 + static_cast<double>(i % 7) + step;
      fc::AllreduceOptions ao;
      ao.algo = plan.op == Op::ring ? fc::AllreduceAlgo::ring : plan.op == Op::tree ? fc::AllreduceAlgo::tree
                                                                                   : fc::AllreduceAlgo::rhd;
      ao.segment_bytes = 1024;
      fc::allreduce(c, fc::kInPlace, buf.data(), buf.size(), fc::DType::f64, fc::ReduceOp::sum, ao);
      double members_sum = 0;
      for (int r : g.members()) members_sum += (r + 1) * 10.0;
      const double n = c.size();
      for (std::size_t i = 0; i < buf.size(); i += 31)
        ASSERT_EQ(buf[i], members_sum + n * (static_cast<double>(i % 7) + step)) << "step " << step << " i " << i;
    });
    if (!ran) ++out_skipped;  // the others finished this step while this rank was behind
    g.set_committed_step(step);
  }
  while (!g.all_finished()) {
  }
  // Every survivor ends with the same members, the same committed step and the same events
  // (failed ranks, survivors, step, attempts): the protocol's decisions are uniform.
  std::string mine = "members";
  for (int r : g.members()) mine += " " + std::to_string(r);
  mine += " committed " + std::to_string(g.committed_step());
  for (const auto& e : g.events()) {
    mine += " | step " + std::to_string(e.step) + " attempts " + std::to_string(e.attempts) + " failed";
    for (int r : e.failed) mine += " " + std::to_string(r);
    mine += " survivors";
    for (int r : e.survivors) mine += " " + std::to_string(r);
  }
  const auto digest = static_cast<std::int64_t>(std::hash<std::string>{}(mine));
  std::vector<std::int64_t> all(static_cast<size_t>(g.size()));
  fc::allgather(g.comm(), &digest, all.data(), 1, fc::DType::i64);
  for (int r = 0; r < g.size(); ++r) EXPECT_EQ(all[static_cast<size_t>(r)], all[0]) << "rank " << g.members()[static_cast<size_t>(r)] << " differs from rank " << g.members()[0] << "; mine: " << mine;
  Outcome out;
  out.skipped = out_skipped;
  EXPECT_LE(out.skipped, static_cast<int>(g.events().size())) << "a rank can fall behind by one step per failure only";
  out.final_size = g.size();
  out.events = g.events();
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::vector<int> all_failed(const Outcome& o) {
  std::vector<int> f;
  for (const auto& e : o.events) f.insert(f.end(), e.failed.begin(), e.failed.end());
  std::sort(f.begin(), f.end());
  return f;
}

TEST(Recovery, KillWhileIdle) {
  ASSERT_EQ(world_size(), 4);
  auto o = run_plan({{"kill:rank=2:step=5"}});
  EXPECT_EQ(o.final_size, 3);
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].failed, std::vector<int>{2});
  EXPECT_EQ(o.events[0].survivors, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(o.events[0].step, 5);
  EXPECT_EQ(o.events[0].committed_min, 4);
  EXPECT_GE(o.events[0].detect_ms, 0.0) << "the injector's fault time must be found";
  EXPECT_NE(o.events[0].culprits[0].find("rank 2 on host"), std::string::npos);
}

TEST(Recovery, KillInsideRingAllreduce) {
  auto o = run_plan({{"kill:rank=1:step=4:phase=allreduce"}, 10, Op::ring});
  EXPECT_EQ(o.final_size, world_size() - 1);
  EXPECT_EQ(all_failed(o), std::vector<int>{1});
}

TEST(Recovery, KillInsideTreeAllreduce) {
  auto o = run_plan({{"kill:rank=3:step=4:phase=allreduce"}, 10, Op::tree});
  EXPECT_EQ(o.final_size, world_size() - 1);
  EXPECT_EQ(all_failed(o), std::vector<int>{3});
}

TEST(Recovery, KillInsideBroadcast) {
  auto o = run_plan({{"kill:rank=0:step=4:phase=broadcast"}, 10, Op::broadcast});
  EXPECT_EQ(o.final_size, world_size() - 1);
  EXPECT_EQ(all_failed(o), std::vector<int>{0});
}

TEST(Recovery, KillRankZero) {
  auto o = run_plan({{"kill:rank=0:step=2"}});
  EXPECT_EQ(o.final_size, world_size() - 1);
  EXPECT_EQ(all_failed(o), std::vector<int>{0});
}

TEST(Recovery, KillTwoAtOnce) {
  auto o = run_plan({{"kill:rank=1:step=3", "kill:rank=3:step=3"}});
  EXPECT_EQ(o.final_size, world_size() - 2);
  EXPECT_EQ(all_failed(o), (std::vector<int>{1, 3}));
}

TEST(Recovery, KillThreeOfFourOneAfterAnother) {
  ASSERT_EQ(world_size(), 4);
  auto o = run_plan({{"kill:rank=0:step=2", "kill:rank=3:step=5", "kill:rank=1:step=8"}, 12});
  EXPECT_EQ(o.final_size, 1) << "the last survivor goes on alone";
  EXPECT_EQ(o.events.size(), 3u);
  EXPECT_EQ(all_failed(o), (std::vector<int>{0, 1, 3}));
}

TEST(Recovery, KillInsideRecovery) {
  // rank 1 dies at step 4; rank 2 dies inside the recovery that follows.
  auto o = run_plan({{"kill:rank=1:step=4", "kill:rank=2:step=4:phase=recovery"}});
  EXPECT_EQ(o.final_size, world_size() - 2);
  EXPECT_EQ(all_failed(o), (std::vector<int>{1, 2}));
}

// A kill at each point of the recovery protocol that another kill at the same step starts.
TEST(Recovery, KillInsideShrink) {
  auto o = run_plan({{"kill:rank=1:step=4", "kill:rank=2:step=4:phase=shrink"}});
  EXPECT_EQ(o.final_size, world_size() - 2);
  EXPECT_EQ(all_failed(o), (std::vector<int>{1, 2}));
}

TEST(Recovery, KillInsideAgree) {
  auto o = run_plan({{"kill:rank=1:step=4", "kill:rank=2:step=4:phase=agree"}});
  EXPECT_EQ(o.final_size, world_size() - 2);
  EXPECT_EQ(all_failed(o), (std::vector<int>{1, 2}));
}

TEST(Recovery, KillInsideHooks) {
  auto o = run_plan({{"kill:rank=1:step=4", "kill:rank=2:step=4:phase=hooks"}});
  EXPECT_EQ(o.final_size, world_size() - 2);
  EXPECT_EQ(all_failed(o), (std::vector<int>{1, 2}));
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_GE(o.events[0].attempts, 2) << "the hooks failed on the first new group, so the protocol ran again";
}

TEST(Recovery, StuckInShrinkLeavesByDeadline) {
  // rank 2 stops making progress just before its MPIX_Comm_shrink (threads alive). Its own 2 s
  // deadline makes it leave; the others see through the heartbeat that it never entered the
  // call, so they wait for it instead of leaving themselves.
  Plan p{{"kill:rank=1:step=4", "stall:rank=2:step=4:phase=shrink"}, 8, Op::ring};
  p.hang_timeout = 1500ms;
  p.ulfm_timeout_s = 2;
  auto o = run_plan(p);
  EXPECT_EQ(o.final_size, world_size() - 2);
  EXPECT_EQ(all_failed(o), (std::vector<int>{1, 2}));
}

TEST(Recovery, ExitWithoutFinalize) {
  auto o = run_plan({{"exit:rank=2:step=3"}});
  EXPECT_EQ(o.final_size, world_size() - 1);
  EXPECT_EQ(all_failed(o), std::vector<int>{2});
}

TEST(Recovery, StoppedRankIsFenced) {
  Plan p{{"hang:rank=2:step=3"}, 8, Op::ring};
  p.hang_timeout = 1500ms;
  auto o = run_plan(p);
  EXPECT_EQ(o.final_size, world_size() - 1);
  ASSERT_EQ(all_failed(o), std::vector<int>{2});
  // Detection within the hang timeout plus 1 s (measured from the SIGSTOP).
  ASSERT_GE(o.events[0].detect_ms, 0.0);
  EXPECT_LT(o.events[0].detect_ms, 1500.0 + 1000.0);
}

TEST(Recovery, SlowRankIsNotFenced) {
  // rank 1 sleeps 3 s in step 2 and 3 (twice the hang timeout); its heartbeat thread goes on.
  Plan p{{"delay:rank=1:step=2:ms=3000", "delay:rank=1:step=3:ms=3000"}, 6, Op::ring};
  p.hang_timeout = 1500ms;
  auto o = run_plan(p);
  EXPECT_EQ(o.final_size, world_size());
  EXPECT_TRUE(o.events.empty());
}

// comm::shrink_and_translate on its own, on a communicator numbered backwards from the world so
// the translation shows: world rank 1 dies, which is rank 2 of the old communicator.
TEST(Ulfm, ShrinkAndTranslateNamesTheLost) {
  ASSERT_EQ(world_size(), 4);
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm backwards = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, 3 - me, &backwards), MPI_SUCCESS);
  MPI_Comm_set_errhandler(backwards, MPI_ERRORS_RETURN);
  if (me == 1) std::raise(SIGKILL);
  // The barrier fails on every survivor (the dead rank never enters it); revoke so that none
  // is left waiting in it, then shrink.
  EXPECT_NE(MPI_Barrier(backwards), MPI_SUCCESS);
  try {
    fc::revoke(backwards);
  } catch (const fc::CommError&) {
  }
  fc::Shrunk s = fc::shrink_and_translate(backwards);
  EXPECT_EQ(s.kept, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(s.lost, std::vector<int>{2});
  int old_rank = -1, new_rank = -1, new_size = 0;
  MPI_Comm_rank(backwards, &old_rank);
  MPI_Comm_rank(s.comm, &new_rank);
  MPI_Comm_size(s.comm, &new_size);
  EXPECT_EQ(new_size, 3);
  EXPECT_EQ(s.kept.at(static_cast<size_t>(new_rank)), old_rank);
  // The new communicator works and holds exactly the survivors: world ranks 0 + 2 + 3.
  int sum = 0;
  EXPECT_EQ(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, s.comm), MPI_SUCCESS);
  EXPECT_EQ(sum, 5);
  MPI_Comm_free(&s.comm);
  MPI_Comm_free(&backwards);
}

}  // namespace

// The failure detector is a seam (GroupOptions::detector, recovery/failure_detector.hpp): a
// scripted detector stands in for the UDP heartbeat. Rank 2's detector reports the rank excluded
// at step 3, as the heartbeat does when a peer lists it as suspected: the group stops the process
// (self-fencing, a real SIGKILL). The others recover through ULFM and tell their detector the rank
// failed (remove), publish their progress into it, and report its statistics.
class ScriptedDetector final : public fr::FailureDetector {
 public:
  explicit ScriptedDetector(int rank) {
    local_.rank = rank;
    local_.host = "scripted";
    local_.host_id = fr::Heartbeat::host_identity();
    local_.pid = static_cast<int>(getpid());
    local_.start_time = fr::process_start_time(local_.pid);
  }
  fr::PeerAddress local_address() const override { return local_; }
  void start(const std::vector<fr::PeerAddress>& peers, const fr::Secret&, std::uint64_t) override {
    started_with = static_cast<int>(peers.size());
  }
  void stop() override { stopped = true; }
  void remove(int rank) override { removed.push_back(rank); }
  void add(const fr::PeerAddress&) override {}
  void set_on_suspect(fr::SuspectCallback cb) override { on_suspect = std::move(cb); }
  void set_on_excluded(fr::ExcludedCallback cb) override { on_excluded = std::move(cb); }
  std::vector<int> suspected() const override { return removed; }
  void set_progress(std::uint32_t entered) override { progress = std::max(progress, entered); }
  int peer_behind(std::uint32_t) const override { return -1; }
  fr::HeartbeatStats stats() const override {
    fr::HeartbeatStats st;
    st.sent = 4242;
    return st;
  }

  int started_with = -1;
  bool stopped = false;
  std::vector<int> removed;
  std::uint32_t progress = 0;
  fr::SuspectCallback on_suspect;
  fr::ExcludedCallback on_excluded;

 private:
  fr::PeerAddress local_;
};

TEST(Recovery, DetectorSwappedIn) {
  ASSERT_EQ(world_size(), 4);
  static ScriptedDetector* mine = nullptr;  // the group owns it; this process has one group
  fr::GroupOptions opt;
  opt.hang_timeout = 5000ms;
  opt.comm_timeout_s = 60;
  opt.detector = [](int rank, const std::string&, const fr::HeartbeatOptions& ho) {
    EXPECT_EQ(ho.timeout, 5000ms);
    auto d = std::make_unique<ScriptedDetector>(rank);
    mine = d.get();
    return d;
  };
  fr::ResilientGroup g(MPI_COMM_WORLD, opt);
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(mine->started_with, 4) << "started with every rank's address";
  ASSERT_TRUE(mine->on_suspect && mine->on_excluded) << "the group listens to its detector";
  EXPECT_EQ(g.peer(g.original_rank()).host, "scripted") << "the group's own address is the detector's";
  std::vector<double> buf(257);
  for (int step = 0; step < 8; ++step) {
    g.begin_step(step);
    if (step == 3 && g.original_rank() == 2) mine->on_excluded(0);  // does not return: SIGKILL
    g.run(step, [&](fc::Communicator& c) {
      std::fill(buf.begin(), buf.end(), g.original_rank() + 1.0);
      fc::allreduce(c, fc::kInPlace, buf.data(), buf.size(), fc::DType::f64, fc::ReduceOp::sum);
      double want = 0;
      for (int r : g.members()) want += r + 1.0;
      ASSERT_EQ(buf[0], want) << "step " << step;
    });
    g.set_committed_step(step);
  }
  while (!g.all_finished()) {
  }
  EXPECT_EQ(all_failed(Outcome{g.size(), 0, g.events(), 0}), std::vector<int>{2});
  EXPECT_EQ(mine->removed, std::vector<int>{2}) << "told the rank failed, once";
  EXPECT_GT(mine->progress, 0u) << "the ULFM calls entered are published to the detector";
  EXPECT_EQ(g.heartbeat_stats().sent, 4242u) << "the statistics are the detector's";
}
