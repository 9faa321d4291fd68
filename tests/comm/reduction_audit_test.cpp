// comm/reduction_audit: the checksums of a SUM allreduce, the audit of its result, and the link
// probe, with ranks as threads over MemoryTransport. Corruption is real: the receive hook flips a
// bit in a message after it arrived and before the algorithm reduces or forwards it.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/memory_transport.hpp"
#include "ftcc/comm/reduction_audit.hpp"
#include "thread_ranks.hpp"

namespace {

using namespace ftcc::comm;

thread_local int t_rank = -1;  // the rank this thread plays (the receive hook is process-wide)

void run_ranks(int n, const std::function<void(Communicator&)>& fn) {
  ftcc_test::run_ranks(n, fn, 30, [](int r) { t_rank = r; });
}

// Flips bit 30 of the middle 32-bit word of the first receive of `victim` in each collective call
// named `op` (at most `times` calls); counts what it flipped.
struct Corruptor {
  Corruptor(int v, std::string o, int t) : victim(v), op(std::move(o)), times(t) {}
  int victim;
  std::string op;
  int times;
  std::atomic<int> fired{0};
  std::mutex mu;
  int last_tag = -1;
  void install() {
    Communicator::set_global_receive_hook([this](const char* name, int tag, void* buf, std::size_t bytes) {
      if (t_rank != victim || op != name || bytes < 8) return;
      std::lock_guard<std::mutex> lock(mu);
      if (tag == last_tag || fired >= times) return;
      last_tag = tag;
      auto* w = static_cast<std::uint32_t*>(buf) + bytes / 8;
      *w ^= 1u << 30;
      ++fired;
    });
  }
  ~Corruptor() { Communicator::set_global_receive_hook(nullptr); }
};

std::vector<float> random_floats(int rank, std::size_t n) {
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::normal_distribution<float> d(0.0f, 1e-2f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Runs one checked allreduce of `count` floats on every rank; returns the audit rank 0 saw (every
// rank must see the same).
ReductionAudit checked_sum_f32(int ranks, std::size_t count, AllreduceAlgo algo) {
  std::vector<ReductionAudit> seen(static_cast<std::size_t>(ranks));
  run_ranks(ranks, [&](Communicator& c) {
    std::vector<float> v = random_floats(c.rank(), count);
    const SumChecksum in = sum_checksum(v.data(), v.size(), DType::f32);
    AllreduceOptions o;
    o.algo = algo;
    allreduce(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum, o);
    const SumChecksum out = sum_checksum(v.data(), v.size(), DType::f32);
    seen[static_cast<std::size_t>(c.rank())] = audit_reductions(c, std::span(&in, 1), std::span(&out, 1), DType::f32);
  });
  for (const auto& a : seen) {
    EXPECT_EQ(a.bad_buffers, seen[0].bad_buffers);
    EXPECT_EQ(a.wrong_at, seen[0].wrong_at);
  }
  return seen[0];
}

const char* op_name(AllreduceAlgo a) {
  return a == AllreduceAlgo::ring ? "ring_allreduce" : a == AllreduceAlgo::tree ? "tree_allreduce" : "rhd_allreduce";
}

TEST(SumChecksum, IsLinearAndExactForIntegers) {
  std::vector<std::int64_t> a(1001), b(1001), s(1001);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<std::int64_t>(i * 7919) - 3000000;
    b[i] = (std::int64_t{1} << 61) - static_cast<std::int64_t>(i);
    s[i] = a[i] + b[i];
  }
  const auto ca = sum_checksum(a.data(), a.size(), DType::i64), cb = sum_checksum(b.data(), b.size(), DType::i64);
  EXPECT_EQ(sum_checksum(s.data(), s.size(), DType::i64).exact, ca.exact + cb.exact);
  // Any single changed bit changes it, and so does a swap of two different elements.
  for (int bit : {0, 17, 62}) {
    auto t = s;
    t[500] ^= std::int64_t{1} << bit;
    EXPECT_NE(sum_checksum(t.data(), t.size(), DType::i64).exact, ca.exact + cb.exact) << bit;
  }
  auto swapped = s;
  std::swap(swapped[3], swapped[4]);
  EXPECT_NE(sum_checksum(swapped.data(), swapped.size(), DType::i64).exact, ca.exact + cb.exact);
}

TEST(SumChecksum, RefusesDtypesWithoutALinearSum) {
  const std::uint8_t bytes[4] = {1, 2, 3, 4};
  EXPECT_THROW(sum_checksum(bytes, 4, DType::u8), ftcc::InvalidArgument);
}

// No false alarm: float rounding in any algorithm and rank count stays inside the tolerance.
TEST(ReductionAudit, CleanSumsPassForEveryAlgorithm) {
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::tree, AllreduceAlgo::rhd})
    for (int ranks : {2, 3, 5, 8})
      for (std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{100003}}) {
        const ReductionAudit a = checked_sum_f32(ranks, count, algo);
        EXPECT_TRUE(a.clean()) << op_name(algo) << " on " << ranks << " ranks, " << count << " floats";
        EXPECT_TRUE(a.wrong_at.empty());
      }
}

// A bit flipped in one message on its way into one rank is seen, whatever the algorithm does with
// it next (reduce it into a partial sum and forward it, or keep it as a final block).
TEST(ReductionAudit, SeesABitFlippedInTransit) {
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::tree, AllreduceAlgo::rhd})
    for (int ranks : {2, 4, 5}) {
      Corruptor bad(1, op_name(algo), 1);
      bad.install();
      const ReductionAudit a = checked_sum_f32(ranks, 4096, algo);
      ASSERT_EQ(bad.fired.load(), 1) << op_name(algo) << " on " << ranks;
      EXPECT_FALSE(a.clean()) << op_name(algo) << " on " << ranks << " ranks";
      EXPECT_FALSE(a.wrong_at.empty());
    }
}

TEST(ReductionAudit, ExactForFixedPointSums) {
  Corruptor bad(2, "ring_allreduce", 1);
  bad.install();
  std::vector<ReductionAudit> seen(3);
  run_ranks(3, [&](Communicator& c) {
    std::vector<std::int64_t> v(5000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i) * (c.rank() + 1) - 77;
    const SumChecksum in[2] = {sum_checksum(v.data(), 2500, DType::i64), sum_checksum(v.data() + 2500, 2500, DType::i64)};
    AllreduceOptions o;
    o.algo = AllreduceAlgo::ring;
    allreduce(c, kInPlace, v.data(), 2500, DType::i64, ReduceOp::sum, o);         // corrupted on rank 2
    allreduce(c, kInPlace, v.data() + 2500, 2500, DType::i64, ReduceOp::sum, o);  // clean
    const SumChecksum out[2] = {sum_checksum(v.data(), 2500, DType::i64), sum_checksum(v.data() + 2500, 2500, DType::i64)};
    seen[static_cast<std::size_t>(c.rank())] = audit_reductions(c, in, out, DType::i64);
  });
  EXPECT_EQ(bad.fired.load(), 1);
  EXPECT_EQ(seen[0].bad_buffers, std::vector<std::size_t>{0});
  EXPECT_EQ(seen[1].bad_buffers, seen[0].bad_buffers);
}

std::vector<LinkProbe> probe(int ranks) {
  std::vector<LinkProbe> seen(static_cast<std::size_t>(ranks));
  run_ranks(ranks, [&](Communicator& c) {
    const std::vector<float> sample = random_floats(c.rank(), 3000);
    seen[static_cast<std::size_t>(c.rank())] = probe_links(c, sample.data(), sample.size() * sizeof(float));
  });
  for (const auto& p : seen) {
    EXPECT_EQ(p.links(), seen[0].links());
    EXPECT_EQ(p.suspects, seen[0].suspects);
  }
  return seen;
}

TEST(LinkProbe, FindsNothingOnCleanLinks) {
  for (int ranks : {1, 2, 3, 6}) {
    const auto seen = probe(ranks);
    EXPECT_TRUE(seen[0].bad_links.empty()) << ranks;
    EXPECT_TRUE(seen[0].suspects.empty()) << ranks;
  }
}

// A rank whose every receive arrives changed (its NIC or memory): both of its incoming links are
// bad, and it alone is the suspect.
TEST(LinkProbe, NamesTheRankWhoseReceivesAreChanged) {
  Corruptor bad(2, "link_probe", 100);
  bad.install();
  const auto seen = probe(4);
  EXPECT_EQ(bad.fired.load(), 2);
  EXPECT_EQ(seen[0].links(), "rank 1 -> rank 2, rank 3 -> rank 2");
  EXPECT_EQ(seen[0].suspects, std::vector<int>{2});
}

// One changed probe of two: the link is named, no rank is.
TEST(LinkProbe, NamesALinkAloneWhenOnlyOneDirectionFails) {
  Corruptor bad(0, "link_probe", 1);
  bad.install();
  const auto seen = probe(3);
  EXPECT_EQ(seen[0].links(), "rank 2 -> rank 0");
  EXPECT_TRUE(seen[0].suspects.empty());
}

// With two ranks the one link names both ends: no single culprit.
TEST(LinkProbe, TwoRanksNameBothEnds) {
  Corruptor bad(1, "link_probe", 100);
  bad.install();
  const auto seen = probe(2);
  EXPECT_EQ(seen[0].links(), "rank 0 -> rank 1");
  EXPECT_EQ(seen[0].suspects, (std::vector<int>{0, 1}));
}

}  // namespace
