// GenerationFence (recovery/generation_fence.hpp): the job's group on record, advanced by each
// recovery, and a process of a group the job left behind refused (Superseded). Real files in a
// fresh folder; the race between survivors of one recovery runs in real processes (fork).
#include "ftcc/recovery/generation_fence.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fr = ftcc::recovery;
namespace fs = std::filesystem;

namespace {

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ftcc-fence-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

constexpr std::uint64_t kJob = 42;

}  // namespace

TEST_F(FenceTest, RecoveriesAdvanceTheRecordAndEachSurvivorMayWriteFirst) {
  fr::GenerationFence f(dir_);
  f.begin(kJob, {3, 0, 2, 1});
  EXPECT_EQ(f.read().generation, 0);
  EXPECT_EQ(f.read().members, (std::vector<int>{0, 1, 2, 3}));
  f.begin(kJob, {0, 1, 2, 3});  // another rank of the same group: nothing changes
  EXPECT_EQ(f.read().generation, 0);
  f.advance(kJob, {0, 1, 3}, 1);  // the first survivor writes
  f.advance(kJob, {3, 1, 0}, 3);  // the others find it written
  EXPECT_EQ(f.read().generation, 1);
  EXPECT_EQ(f.read().members, (std::vector<int>{0, 1, 3}));
  f.check(kJob, 0, "writing a checkpoint");
  f.advance(kJob, {0, 1, 3}, 0);  // a recovery that lost nobody (a job error)
  EXPECT_EQ(f.read().generation, 1);
  // A spare or a new process (rank 4) joins: recorded once the group is filled.
  f.advance(kJob, {0, 1, 3, 4}, 0);
  f.check(kJob, 4, "writing");
  EXPECT_EQ(f.read().generation, 2);
}

TEST_F(FenceTest, AStaleCopyIsRefusedWhateverItsStepsAre) {
  fr::GenerationFence f(dir_);
  f.begin(kJob, {0, 1, 2, 3});
  f.advance(kJob, {0, 1, 3}, 0);  // rank 2 stopped and excluded
  // Rank 2 wakes up, suspects everyone and "recovers" alone: it is not in the job's group.
  try {
    f.advance(kJob, {2}, 2);
    FAIL() << "a stale copy recorded its group";
  } catch (const fr::Superseded& e) {
    EXPECT_EQ(e.rank(), 2);
    EXPECT_EQ(e.generation(), 1);
    EXPECT_EQ(e.job_members(), (std::vector<int>{0, 1, 3}));
    EXPECT_NE(std::string(e.what()).find("was excluded: the job went on without it"), std::string::npos) << e.what();
  }
  // Or it writes before any recovery of its own.
  EXPECT_THROW(f.check(kJob, 2, "writing checkpoint 900"), fr::Superseded);
  // Still refused after the job's group changed again; the record is the job's.
  f.advance(kJob, {0, 3}, 0);
  EXPECT_THROW(f.advance(kJob, {1, 3}, 1), fr::Superseded);
  EXPECT_EQ(f.read().members, (std::vector<int>{0, 3}));
}

TEST_F(FenceTest, AnEarlierGroupOfTheSameProcessesIsSuperseded) {
  fr::GenerationFence f(dir_);
  f.begin(kJob, {0, 1});
  f.begin(kJob + 1, {0, 1});  // a new ResilientGroup of the same processes
  EXPECT_EQ(f.read().job, kJob + 1);
  EXPECT_THROW(f.check(kJob, 0, "writing"), fr::Superseded);
  f.check(kJob + 1, 0, "writing");
}

TEST_F(FenceTest, OffWithoutAFolderAndBestEffortWithoutARecord) {
  fr::GenerationFence off("");
  EXPECT_FALSE(off.enabled());
  off.begin(kJob, {0});
  off.advance(kJob, {5}, 5);
  off.check(kJob, 7, "anything");
  fr::GenerationFence f(dir_);
  f.check(kJob, 0, "writing");  // nothing on record: nothing to compare with
  f.advance(kJob, {0, 1}, 0);   // the record was removed: started anew
  EXPECT_EQ(f.read().members, (std::vector<int>{0, 1}));
}

// Writers racing from the same generation, in real processes: the survivors of a recovery record
// {0, 1, 4} while a stale copy (rank 2, still in the record they all read) records {2}. Either may
// win, but never both: every writer that was not refused is in the final record, and every
// refused one is not (the record is never overwritten by a loser). 40 rounds.
TEST_F(FenceTest, WritersRacingFromOneGenerationAgreeOnTheWinnerInRealProcesses) {
  int stale_won = 0;
  for (int round = 0; round < 40; ++round) {
    for (const auto& e : fs::directory_iterator(dir_)) fs::remove(e.path());
    fr::GenerationFence f(dir_);
    f.begin(kJob, {0, 1, 2, 4});
    const std::vector<int> writers = {0, 1, 4, 2};
    std::vector<pid_t> kids;
    for (int r : writers) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        int code = 0;
        try {
          f.advance(kJob, r == 2 ? std::vector<int>{2} : std::vector<int>{0, 1, 4}, r);
        } catch (const fr::Superseded&) {
          code = 3;
        } catch (...) {
          code = 4;
        }
        _exit(code);
      }
      kids.push_back(pid);
    }
    std::vector<int> codes;
    for (pid_t k : kids) {
      int st = 0;
      waitpid(k, &st, 0);
      codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    const auto rec = f.read();
    EXPECT_EQ(rec.generation, 1) << "round " << round << ": one winner, one new generation";
    for (size_t i = 0; i < writers.size(); ++i) {
      const bool in = std::find(rec.members.begin(), rec.members.end(), writers[i]) != rec.members.end();
      EXPECT_EQ(codes[i], in ? 0 : 3) << "round " << round << ": rank " << writers[i] << " exit " << codes[i];
    }
    stale_won += rec.members == std::vector<int>{2};
  }
  // The stale copy only wins a race it should never be in (the survivors record first: see the
  // header); both outcomes are consistent.
  std::printf("the stale copy won %d of 40 races\n", stale_won);
}

// After the survivors recorded their group, a stale copy is refused whatever it writes, also in
// a separate process.
TEST_F(FenceTest, AStaleCopyAfterTheSurvivorsRecordedIsRefusedInARealProcess) {
  fr::GenerationFence f(dir_);
  f.begin(kJob, {0, 1, 2, 3});
  f.advance(kJob, {0, 1, 3}, 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      f.advance(kJob, {2}, 2);
    } catch (const fr::Superseded&) {
      code = 3;
    }
    _exit(code);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 3);
  EXPECT_EQ(f.read().members, (std::vector<int>{0, 1, 3}));
}
