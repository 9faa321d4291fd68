// Collective mismatch detection on the shared-memory path (comm/shm_steps.hpp, ShmCall): ranks
// that call different collectives, or the same one with a different count, dtype, op or root, get
// CollectiveMismatch on every rank, with one message naming each rank's call, instead of garbage;
// the communicator stays usable. Run under tools/ftcc-run with 3 ranks (one host: shared memory).
// Over MPI point-to-point (FTCC_SHM=0, CollectiveMismatchP2P): each collective's tag carries its
// call key (kind, count, dtype, op, root), so mismatched calls never exchange a message: every rank
// ends at its deadline with a Timeout instead of returning what another call sent.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ftcc/comm/collectives.hpp"

namespace {

using namespace ftcc::comm;

constexpr const char* kAdvice =
    ". Every rank must call the same collectives in the same order, with the same count, dtype, op and root";

// Runs `call(comm)` on every rank and returns this rank's CollectiveMismatch message from
// "collective mismatch" on ("" when none was thrown; before it, each rank names the operation it
// was in). With `usable`, a matched allreduce must work afterwards (every rank left the calls at
// the same round).
std::string mismatch_of(const std::function<void(Communicator&)>& call, bool usable) {
  Communicator comm = Communicator::duplicate(MPI_COMM_WORLD, CommOptions{20});
  float warm = 1.0f;  // the segment is set up by a matched call
  allreduce(comm, kInPlace, &warm, 1, DType::f32, ReduceOp::sum);
  if (!comm.uses_shared_memory()) return "(no shared memory)";
  std::string what;
  try {
    call(comm);
  } catch (const CollectiveMismatch& e) {
    what = e.what();
    EXPECT_NE(what.find(": collective mismatch: "), std::string::npos) << what;
    what = what.substr(what.find("collective mismatch: "));
    std::printf("[rank %d] %s\n", comm.rank(), e.what());
  }
  if (usable) {
    std::vector<float> v(1000, static_cast<float>(comm.rank() + 1));
    allreduce(comm, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum);
    const float want = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
    for (float x : v) EXPECT_EQ(x, want);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return what;
}

// Every rank compares every rank's call: the same message everywhere.
TEST(CollectiveMismatch, CountAndDtype) {
  const std::string m = mismatch_of([](Communicator& c) {
    std::vector<double> v(8, 1.0);
    if (c.rank() == 0)
      allreduce(c, kInPlace, v.data(), 4, DType::f32, ReduceOp::sum);
    else
      allreduce(c, kInPlace, v.data(), 8, DType::f64, ReduceOp::sum);
  }, true);
  EXPECT_EQ(m, std::string("collective mismatch: rank 0 called allreduce(sum, f32, 4 elements); ranks 1, 2 called "
                           "allreduce(sum, f64, 8 elements)") + kAdvice);
}

TEST(CollectiveMismatch, ReduceOp) {
  const std::string m = mismatch_of([](Communicator& c) {
    std::vector<float> v(64, 1.0f);
    allreduce(c, kInPlace, v.data(), v.size(), DType::f32, c.rank() == 2 ? ReduceOp::max : ReduceOp::sum);
  }, true);
  EXPECT_EQ(m, std::string("collective mismatch: ranks 0, 1 called allreduce(sum, f32, 64 elements); rank 2 called "
                           "allreduce(max, f32, 64 elements)") + kAdvice);
}

TEST(CollectiveMismatch, BarrierAgainstAllgather) {
  const std::string m = mismatch_of([](Communicator& c) {
    std::vector<int> mine(2, c.rank()), all(2 * static_cast<std::size_t>(c.size()));
    if (c.rank() == 1)
      barrier(c);
    else
      allgather(c, mine.data(), all.data(), mine.size(), DType::i32);
  }, true);
  EXPECT_EQ(m, std::string("collective mismatch: ranks 0, 2 called allgather(8 bytes); rank 1 called barrier()") + kAdvice);
}

// The program: rank 0 all_reduce then broadcast, the others broadcast then all_reduce.
// Rank 0 compares all three calls; a broadcast's non-root compares its root's with its own.
TEST(CollectiveMismatch, AllreduceAgainstBroadcast) {
  const int me = [] { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }();
  const std::string m = mismatch_of([](Communicator& c) {
    std::vector<float> v(4, 1.0f);
    if (c.rank() == 0) {
      allreduce(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum);
      broadcast(c, v.data(), v.size(), DType::f32, 0);
    } else {
      broadcast(c, v.data(), v.size(), DType::f32, 0);
      allreduce(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum);
    }
  }, false);
  if (me == 0)
    EXPECT_EQ(m, std::string("collective mismatch: rank 0 called allreduce(sum, f32, 4 elements); ranks 1, 2 called "
                             "broadcast(16 bytes, root 0)") + kAdvice);
  else
    EXPECT_EQ(m, "collective mismatch: rank 0, the root rank " + std::to_string(me) +
                     " named, called allreduce(sum, f32, 4 elements); rank " + std::to_string(me) +
                     " called broadcast(16 bytes, root 0)" + kAdvice);
}

// Ranks 0 and 1 both call broadcast as its root; rank 2 names rank 0. One root takes the round;
// the other says so; rank 2 gets rank 0's data, or, if rank 0 lost, says that rank 0 found
// another root. Nobody returns data another call wrote.
TEST(CollectiveMismatch, BroadcastRoot) {
  const int me = [] { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }();
  std::vector<float> got;
  const std::string m = mismatch_of([&](Communicator& c) {
    std::vector<float> v(100, c.rank() < 2 ? 10.0f + static_cast<float>(c.rank()) : -1.0f);
    broadcast(c, v.data(), v.size(), DType::f32, c.rank() == 1 ? 1 : 0);
    got = v;
  }, false);
  int threw = m.empty() ? 0 : 1, roots_threw = me < 2 ? threw : 0;
  MPI_Allreduce(MPI_IN_PLACE, &roots_threw, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(roots_threw, 1) << "exactly one of the two roots finds the other";
  if (me < 2 && threw) {
    const int other = 1 - me;
    EXPECT_EQ(m, "collective mismatch: rank " + std::to_string(other) + " called broadcast(400 bytes, root " +
                     std::to_string(other) + ") and rank " + std::to_string(me) + " called broadcast(400 bytes, root " +
                     std::to_string(me) + "), both as the root at the same point" + kAdvice);
  }
  if (me == 2 && threw)
    EXPECT_EQ(m, std::string("collective mismatch: rank 0, the root rank 2 named, found another rank calling broadcast "
                             "as the root at the same point") + kAdvice);
  if (me == 2 && !threw) EXPECT_EQ(got, std::vector<float>(100, 10.0f)) << "rank 2 returned data rank 0 did not send";
}

// The root of a scatter waits for nobody: it returns; the ranks in reduce compare everyone's.
TEST(CollectiveMismatch, ScatterAgainstReduce) {
  const int me = [] { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }();
  const std::string m = mismatch_of([](Communicator& c) {
    std::vector<float> in(3 * 16, 1.0f), out(16);
    if (c.rank() == 0)
      scatter(c, in.data(), out.data(), out.size(), DType::f32, 0);
    else
      reduce(c, in.data(), out.data(), out.size(), DType::f32, ReduceOp::sum, 0);
  }, true);
  EXPECT_EQ(m, me == 0 ? std::string()
                       : std::string("collective mismatch: rank 0 called scatter(64 bytes, root 0); ranks 1, 2 called "
                                     "reduce(sum, f32, 16 elements, root 0)") + kAdvice);
}

TEST(CollectiveMismatch, MatchedCallsPass) {
  const std::string m = mismatch_of([](Communicator& c) {
    std::vector<float> v(3 * 1000, 1.0f), out(1000);
    allreduce(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum);
    broadcast(c, v.data(), v.size(), DType::f32, 2);
    scatter(c, v.data(), out.data(), out.size(), DType::f32, 1);
    reduce_scatter(c, v.data(), out.data(), out.size(), DType::f32, ReduceOp::max);
    barrier(c);
  }, true);
  EXPECT_EQ(m, "");
}

// Over point-to-point: every rank's call ends with a Timeout at its 1 s deadline, none returns.
void expect_p2p_timeout(const std::function<void(Communicator&)>& call) {
  Communicator comm = Communicator::duplicate(MPI_COMM_WORLD, CommOptions{1.0});
  float warm = 1.0f;
  allreduce(comm, kInPlace, &warm, 1, DType::f32, ReduceOp::sum);
  if (comm.uses_shared_memory()) GTEST_SKIP() << "run with FTCC_SHM=0";
  try {
    call(comm);
    ADD_FAILURE() << "rank " << comm.rank() << ": the mismatched call returned";
  } catch (const Timeout& e) {
    SUCCEED() << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CollectiveMismatchP2P, CountAndDtype) {
  expect_p2p_timeout([](Communicator& c) {
    std::vector<double> v(8, 1.0);
    if (c.rank() == 0)
      allreduce(c, kInPlace, v.data(), 4, DType::f32, ReduceOp::sum);
    else
      allreduce(c, kInPlace, v.data(), 8, DType::f64, ReduceOp::sum);
  });
}

TEST(CollectiveMismatchP2P, AllreduceAgainstBroadcast) {
  expect_p2p_timeout([](Communicator& c) {
    std::vector<float> v(4, 1.0f);
    if (c.rank() == 0)
      allreduce(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum);
    else
      broadcast(c, v.data(), v.size(), DType::f32, 0);
  });
}

}  // namespace
