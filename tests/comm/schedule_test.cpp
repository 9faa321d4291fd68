// Schedule tests without MPI: ranks are threads over MemoryTransport (comm/memory_transport.hpp).
//
// Inputs are closed-form so every thread knows the expected answer exactly: rank r contributes
// x[i] = (r + 1) * (i % 7 + 1) (small integers, exact in every dtype, so even float sums are
// exact in any order), and the sweep covers 1..9 ranks, counts around the rank count, tiny
// segment sizes (many segments, deep pipelines) and in-place/out-of-place.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/allreduce_async.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/reduce_kernels.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/memory_transport.hpp"
#include "ftcc/comm/subgroup_transport.hpp"
#include "thread_ranks.hpp"

namespace {

using namespace ftcc::comm;

using ftcc_test::run_ranks;

std::int64_t x(int rank, std::size_t i) { return (rank + 1) * static_cast<std::int64_t>(i % 7 + 1); }

std::int64_t expected(ReduceOp op, int n, std::size_t i) {
  std::int64_t acc = x(0, i);
  for (int r = 1; r < n; ++r) {
    const std::int64_t v = x(r, i);
    switch (op) {
      case ReduceOp::sum: acc += v; break;
      case ReduceOp::prod: acc *= v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
    }
  }
  return acc;
}

std::vector<std::size_t> counts_for(int n) {
  std::vector<std::size_t> c{0, 1, static_cast<std::size_t>(n), static_cast<std::size_t>(n) + 1, 97, 1000};
  if (n > 1) c.push_back(static_cast<std::size_t>(n) - 1);
  return c;
}

using AllreduceFn = void (*)(Communicator&, const void*, void*, std::size_t, DType, ReduceOp,
                             const CollectiveOptions&);

struct Algo {
  const char* name;
  AllreduceFn fn;
};
const Algo kAlgos[] = {{"ring", ring_allreduce}, {"tree", tree_allreduce}, {"rhd", rhd_allreduce}};

template <class T>
void check_allreduce(const Algo& algo, int n, std::size_t count, ReduceOp op, bool in_place, std::size_t seg) {
  run_ranks(n, [&](Communicator& c) {
    std::vector<T> in(count), out(count, T(-99));
    for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<T>(x(c.rank(), i));
    if (in_place) out = in;
    CollectiveOptions o;
    o.segment_bytes = seg;
    o.window = 2;
    algo.fn(c, in_place ? nullptr : in.data(), out.data(), count, dtype_of<T>(), op, o);
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[i], static_cast<T>(expected(op, n, i)))
          << algo.name << " n=" << n << " count=" << count << " op=" << to_string(op) << " i=" << i
          << " rank=" << c.rank() << " in_place=" << in_place << " seg=" << seg;
  });
}

TEST(Schedule, AllreduceAllAlgorithmsRanksCounts) {
  for (const Algo& a : kAlgos)
    for (int n = 1; n <= 9; ++n)
      for (std::size_t count : counts_for(n))
        for (std::size_t seg : {std::size_t{8}, std::size_t{0}}) {
          check_allreduce<std::int64_t>(a, n, count, ReduceOp::sum, false, seg);
          check_allreduce<float>(a, n, count, ReduceOp::sum, true, seg);
        }
}

TEST(Schedule, AllreduceOpsAndDtypes) {
  for (const Algo& a : kAlgos)
    for (int n : {2, 3, 5})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max}) {
        check_allreduce<std::int32_t>(a, n, 37, op, false, 16);
        check_allreduce<double>(a, n, 37, op, true, 16);
      }
}

// u8, float16 and bfloat16 (the types PyTorch programs hand the torch backend): small integers
// are exact in all three, so every algorithm and order must give the exact result; u8 wraps mod 256.
std::uint16_t f16_bits(float f) {
  const auto h = static_cast<_Float16>(f);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
std::uint16_t bf16_bits(float f) {  // exact for the values used here (8 significant bits)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

TEST(Schedule, AllreduceNarrowTypes) {
  // Inputs whose results are exact in 8 significant bits: products of 1s and 2s, sums below 256.
  auto in = [](ReduceOp op, int rank, std::size_t i) -> std::int64_t {
    return op == ReduceOp::prod ? 1 + static_cast<std::int64_t>((static_cast<std::size_t>(rank) + i) % 2) : x(rank, i);
  };
  for (const Algo& algo : kAlgos)
    for (int n : {2, 3, 4})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::prod}) {
        const std::size_t count = 301;
        run_ranks(n, [&](Communicator& c) {
          std::vector<std::uint8_t> u(count);
          std::vector<std::uint16_t> h(count), b(count);
          for (std::size_t i = 0; i < count; ++i) {
            const auto v = in(op, c.rank(), i);
            u[i] = static_cast<std::uint8_t>(v + (op == ReduceOp::sum ? 60 : 0));  // u8 sums pass 255: wrap
            h[i] = f16_bits(static_cast<float>(v));
            b[i] = bf16_bits(static_cast<float>(v));
          }
          CollectiveOptions o;
          o.segment_bytes = 64;
          algo.fn(c, kInPlace, u.data(), count, DType::u8, op, o);
          algo.fn(c, kInPlace, h.data(), count, DType::f16, op, o);
          algo.fn(c, kInPlace, b.data(), count, DType::bf16, op, o);
          for (std::size_t i = 0; i < count; ++i) {
            std::int64_t want = in(op, 0, i), want_u = want + (op == ReduceOp::sum ? 60 : 0);
            for (int r = 1; r < n; ++r) {
              const auto v = in(op, r, i);
              switch (op) {
                case ReduceOp::sum: want += v; want_u += v + 60; break;
                case ReduceOp::prod: want *= v; want_u *= v; break;
                case ReduceOp::min: want = std::min(want, v); want_u = want; break;
                case ReduceOp::max: want = std::max(want, v); want_u = want; break;
              }
            }
            const auto where = [&] {
              return std::string(algo.name) + " n=" + std::to_string(n) + " op=" + to_string(op) + " i=" + std::to_string(i);
            };
            ASSERT_EQ(u[i], static_cast<std::uint8_t>(want_u & 0xff)) << where();
            ASSERT_EQ(h[i], f16_bits(static_cast<float>(want))) << where();
            ASSERT_EQ(b[i], bf16_bits(static_cast<float>(want))) << where();
          }
        });
      }
}

// Rounding of the 16-bit floats: to nearest, ties to even, NaN kept, as torch's Half/BFloat16.
TEST(ReduceKernels, SixteenBitFloatsRoundToNearestEven) {
  // bfloat16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to the even one, 1.
  const std::uint16_t one = 0x3f80, tiny = bf16_bits(std::ldexp(1.0f, -8));
  std::uint16_t out = 0;
  ftcc::comm::reduce(&out, &one, &tiny, 1, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(out, 0x3f80);
  const std::uint16_t more = bf16_bits(std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12));  // past the tie
  ftcc::comm::reduce(&out, &one, &more, 1, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(out, 0x3f81);
  const std::uint16_t nan = 0x7fc1;
  ftcc::comm::reduce(&out, &nan, &one, 1, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(out & 0x7f80, 0x7f80);
  EXPECT_NE(out & 0x007f, 0);
  // float16: 2048 + 1 is a tie between 2048 and 2050: rounds to 2048; 65504 + 65504 overflows to inf.
  const std::uint16_t a = f16_bits(2048), b = f16_bits(1), big = f16_bits(65504);
  ftcc::comm::reduce(&out, &a, &b, 1, DType::f16, ReduceOp::sum);
  EXPECT_EQ(out, f16_bits(2048));
  ftcc::comm::reduce(&out, &big, &big, 1, DType::f16, ReduceOp::sum);
  EXPECT_EQ(out, 0x7c00);
}

TEST(Schedule, AutoAllreduceAndEnvOverride) {
  for (AllreduceAlgo algo : {AllreduceAlgo::automatic, AllreduceAlgo::ring, AllreduceAlgo::tree, AllreduceAlgo::rhd})
    run_ranks(4, [&](Communicator& c) {
      std::vector<std::int64_t> v(50000);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = x(c.rank(), i);
      AllreduceOptions o;
      o.algo = algo;
      allreduce(c, kInPlace, v.data(), v.size(), DType::i64, ReduceOp::sum, o);
      for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], expected(ReduceOp::sum, 4, i));
    });
  EXPECT_EQ(parse_allreduce_algo("ring"), AllreduceAlgo::ring);
  EXPECT_THROW(parse_allreduce_algo("bogus"), ftcc::InvalidArgument);
}

TEST(Schedule, BroadcastBinomialAndChain) {
  for (int n = 1; n <= 8; ++n)
    for (BroadcastAlgo algo : {BroadcastAlgo::binomial, BroadcastAlgo::chain})
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{333}})
        for (int root : {0, n - 1, n / 2})
          run_ranks(n, [&](Communicator& c) {
            std::vector<std::int32_t> v(count, -1);
            if (c.rank() == root)
              for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<std::int32_t>(i * 3 + 1);
            BroadcastOptions o;
            o.algo = algo;
            o.segment_bytes = 40;
            broadcast(c, v.data(), count, DType::i32, root, o);
            for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(v[i], static_cast<std::int32_t>(i * 3 + 1));
          });
}

TEST(Schedule, ReduceToEveryRoot) {
  for (int n = 1; n <= 7; ++n)
    for (int root = 0; root < n; ++root)
      run_ranks(n, [&](Communicator& c) {
        const std::size_t count = 101;
        std::vector<std::int64_t> in(count), out(count, -1);
        for (std::size_t i = 0; i < count; ++i) in[i] = x(c.rank(), i);
        CollectiveOptions o;
        o.segment_bytes = 64;
        reduce(c, in.data(), c.rank() == root ? out.data() : nullptr, count, DType::i64, ReduceOp::sum, root, o);
        if (c.rank() == root) {
          for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], expected(ReduceOp::sum, n, i));
        }
      });
}

TEST(Schedule, ReduceScatterAndAllgather) {
  for (int n = 1; n <= 8; ++n)
    for (std::size_t rc : {std::size_t{0}, std::size_t{1}, std::size_t{13}})
      for (bool in_place : {false, true})
        run_ranks(n, [&](Communicator& c) {
          const std::size_t total = rc * static_cast<std::size_t>(n);
          std::vector<std::int64_t> in(total), out(in_place ? total : rc, -1);
          for (std::size_t i = 0; i < total; ++i) in[i] = x(c.rank(), i);
          CollectiveOptions o;
          o.segment_bytes = 16;
          if (in_place) {
            out = in;
            reduce_scatter(c, kInPlace, out.data(), rc, DType::i64, ReduceOp::max, o);
          } else {
            reduce_scatter(c, in.data(), out.data(), rc, DType::i64, ReduceOp::max, o);
          }
          for (std::size_t i = 0; i < rc; ++i)
            ASSERT_EQ(out[i], expected(ReduceOp::max, n, c.rank() * rc + i)) << "n=" << n << " rc=" << rc;

          std::vector<std::int64_t> mine(rc), all(total, -1);
          for (std::size_t i = 0; i < rc; ++i) mine[i] = c.rank() * 1000 + static_cast<std::int64_t>(i);
          if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(c.rank() * rc));
          allgather(c, in_place ? nullptr : mine.data(), all.data(), rc, DType::i64, o);
          for (int r = 0; r < n; ++r)
            for (std::size_t i = 0; i < rc; ++i) ASSERT_EQ(all[r * rc + i], r * 1000 + static_cast<std::int64_t>(i));
        });
}

// alltoallv with uneven counts (rank r sends p+r+... elements to p, some of them empty), then
// gather and scatter to and from every root.
TEST(Schedule, AlltoallGatherScatter) {
  for (int n : {1, 2, 3, 5}) {
    run_ranks(n, [&](Communicator& c) {
      const int r = c.rank();
      auto count = [](int from, int to) { return static_cast<std::size_t>((from * 3 + to) % 4); };
      auto value = [](int from, int to, std::size_t i) { return static_cast<std::int64_t>(from * 1000 + to * 10) + static_cast<std::int64_t>(i); };
      std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
      std::size_t st = 0, rt = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = count(r, p), sd[p] = st, st += sc[p];
        rc[p] = count(p, r), rd[p] = rt, rt += rc[p];
      }
      std::vector<std::int64_t> in(st), out(rt, -1);
      for (int p = 0; p < n; ++p)
        for (std::size_t i = 0; i < sc[p]; ++i) in[sd[p] + i] = value(r, p, i);
      alltoallv(c, in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(), DType::i64);
      for (int p = 0; p < n; ++p)
        for (std::size_t i = 0; i < rc[p]; ++i) ASSERT_EQ(out[rd[p] + i], value(p, r, i)) << "n=" << n << " r=" << r << " from " << p;
      for (int root = 0; root < n; ++root) {
        const std::int64_t mine[2] = {r * 7 + root, -r};
        std::vector<std::int64_t> all(2 * static_cast<std::size_t>(n), -99);
        gather(c, mine, r == root ? all.data() : nullptr, 2, DType::i64, root);
        if (r == root)
          for (int p = 0; p < n; ++p) {
            ASSERT_EQ(all[2 * p], p * 7 + root);
            ASSERT_EQ(all[2 * p + 1], -p);
          }
        std::vector<std::int64_t> parts(2 * static_cast<std::size_t>(n));
        for (int p = 0; p < n; ++p) parts[2 * p] = root * 100 + p, parts[2 * p + 1] = p;
        std::int64_t got[2] = {-1, -1};
        scatter(c, r == root ? parts.data() : nullptr, got, 2, DType::i64, root);
        ASSERT_EQ(got[0], root * 100 + r);
        ASSERT_EQ(got[1], r);
      }
    });
  }
}

TEST(Schedule, BarrierAndBackToBackCollectives) {
  for (int n : {1, 2, 3, 5, 8})
    run_ranks(n, [&](Communicator& c) {
      for (int it = 0; it < 20; ++it) {
        barrier(c);
        std::int64_t v = c.rank() + it;
        ring_allreduce(c, kInPlace, &v, 1, DType::i64, ReduceOp::sum);
        ASSERT_EQ(v, n * (n - 1) / 2 + n * it);
      }
    });
}

TEST(Schedule, BarrierWaitsForTheLastRank) {
  std::atomic<int> entered{0};
  run_ranks(4, [&](Communicator& c) {
    if (c.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    entered.fetch_add(1);
    barrier(c);
    EXPECT_EQ(entered.load(), 4);
  });
}

TEST(Schedule, PointToPoint) {
  run_ranks(3, [&](Communicator& c) {
    const int right = (c.rank() + 1) % 3, left = (c.rank() + 2) % 3;
    double out = c.rank() + 0.5, in = -1;
    auto r = c.irecv(&in, 1, DType::f64, left, 7);
    c.send(&out, 1, DType::f64, right, 7);
    r.wait();
    EXPECT_EQ(in, left + 0.5);
  });
}

TEST(Schedule, NonblockingAllreduceOverlapsOtherCollectives) {
  run_ranks(4, [&](Communicator& c) {
    std::vector<std::int64_t> a(5000), b(3000);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = x(c.rank(), i);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = x(c.rank(), i + 1);
    AllreduceOptions o;
    o.algo = AllreduceAlgo::ring;
    o.segment_bytes = 512;
    auto req = allreduce_async(c, kInPlace, a.data(), a.size(), DType::i64, ReduceOp::sum, o);
    auto req2 = allreduce_async(c, kInPlace, b.data(), b.size(), DType::i64, ReduceOp::max, o);
    std::int64_t s = 1;
    tree_allreduce(c, kInPlace, &s, 1, DType::i64, ReduceOp::sum);  // a blocking one in between
    EXPECT_EQ(s, 4);
    req2.wait();
    req.wait();
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], expected(ReduceOp::sum, 4, i));
    for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], expected(ReduceOp::max, 4, i + 1));
  });
}

TEST(Schedule, TimeoutNamesThePeerThatNeverSent) {
  std::atomic<int> timeouts{0};
  run_ranks(3, [&](Communicator& c) {
    if (c.rank() == 2) return;  // never takes part
    std::vector<float> v(100, 1.0f);
    CollectiveOptions o;
    o.timeout_s = 0.3;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      ring_allreduce(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum, o);
      ADD_FAILURE() << "no timeout";
    } catch (const Timeout& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GE(e.waited_s(), 0.3);
      EXPECT_LT(s, 2.0);
      EXPECT_EQ(e.op(), "ring_allreduce");
      ASSERT_FALSE(e.pending_peers().empty());
      // Rank 0's left neighbour is rank 2, the absent one; rank 1 waits on rank 0.
      if (c.rank() == 0) {
        EXPECT_EQ(e.pending_peers().front(), 2) << e.what();
      }
      ++timeouts;
    }
  });
  EXPECT_EQ(timeouts.load(), 2);
}

// A nonblocking allreduce that fails hands its exception to the waiter, and the waiter alone ends
// its life: the progress thread keeps no reference once it has reported, so it never destroys an
// exception the waiter has already read (ThreadSanitizer, which runs this suite, saw that race on a
// CommError's vtable pointer in ftcc-train, since the count of an exception's references lives in
// the uninstrumented C++ runtime).
TEST(Schedule, FailedNonblockingAllreduceLeavesItsErrorToTheWaiter) {
  std::atomic<int> timeouts{0};
  run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 1) return;  // never takes part
    AllreduceOptions o;
    o.algo = AllreduceAlgo::ring;
    o.timeout_s = 0.001;
    for (int i = 0; i < 40; ++i) {
      std::vector<float> v(64, 1.0f);
      auto req = allreduce_async(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum, o);
      try {
        req.wait();
        ADD_FAILURE() << "no timeout";
      } catch (const Timeout& e) {
        EXPECT_EQ(e.op(), "ring_allreduce") << e.what();
        ++timeouts;
      }
    }
  });
  EXPECT_EQ(timeouts.load(), 40);
}

TEST(Schedule, PeerFailurePropagatesAsProcessFailed) {
  auto world = MemoryWorld::create(4);
  std::atomic<int> failed{0};
  std::vector<std::thread> ts;
  for (int r = 0; r < 4; ++r)
    ts.emplace_back([&, r] {
      Communicator c(world->endpoint(r), CommOptions{10});
      if (r == 1)
        c.set_fault_hook([&](const char*, int step) {
          if (step == 3) {
            world->mark_failed(1);
            throw std::runtime_error("rank 1 dies");
          }
        });
      std::vector<std::int64_t> v(4000, 1);
      CollectiveOptions o;
      o.segment_bytes = 256;
      try {
        ring_allreduce(c, kInPlace, v.data(), v.size(), DType::i64, ReduceOp::sum, o);
      } catch (const ProcessFailed& e) {
        ++failed;
        EXPECT_FALSE(e.failed_ranks().empty());
        world->mark_failed(r);  // stand-in for revoke: the others stop waiting on this rank too
      } catch (const std::runtime_error&) {
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failed.load(), 3);  // every survivor stops with ProcessFailed, none hangs
}

TEST(Schedule, FaultHookSeesEverySend) {
  run_ranks(4, [&](Communicator& c) {
    int calls = 0;
    c.set_fault_hook([&](const char* op, int step) {
      EXPECT_STREQ(op, "ring_allreduce");
      EXPECT_EQ(step, calls);
      ++calls;
    });
    std::vector<float> v(400, 1.0f);
    CollectiveOptions o;
    o.segment_bytes = 100;  // 25 floats: 100-float blocks are 4 segments
    ring_allreduce(c, kInPlace, v.data(), v.size(), DType::f32, ReduceOp::sum, o);
    EXPECT_EQ(calls, 2 * 3 * 4);  // two phases x (n-1) steps x 4 segments
  });
}

TEST(DeviceStaging, HostBuffersPassStraightThrough) {
  // Without a loaded CUDA driver (or for host memory) nothing is staged: fn sees the caller's pointers.
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  EXPECT_FALSE(detail::is_device_pointer(a.data()));
  const void* seen_send = nullptr;
  void* seen_recv = nullptr;
  detail::with_host_buffers(a.data(), 32, b.data(), 0, 32, [&](const void* s, void* r) {
    seen_send = s;
    seen_recv = r;
  });
  EXPECT_EQ(seen_send, a.data());
  EXPECT_EQ(seen_recv, b.data());
}

TEST(Environment, TimeoutAndAlgorithmOverrides) {
  setenv("FTCC_COMM_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(default_timeout_s(), 2.5);
  {
    auto world = MemoryWorld::create(1);
    Communicator c(world->endpoint(0));
    EXPECT_EQ(c.timeout_s(), 2.5);
    Communicator d(world->endpoint(0), CommOptions{7});
    EXPECT_EQ(d.timeout_s(), 7);
    EXPECT_EQ(d.resolve_timeout(0), 7);
    EXPECT_EQ(d.resolve_timeout(1.5), 1.5);
  }
  // Parsed like a flag (base/env_number.hpp): refused, not silently the default.
  for (const char* bad : {"nonsense", "5abc", "0", "inf", "1e12", "nan"}) {
    setenv("FTCC_COMM_TIMEOUT_S", bad, 1);
    EXPECT_THROW(default_timeout_s(), ftcc::InvalidArgument) << bad;
  }
  setenv("FTCC_COMM_TIMEOUT_S", "", 1);
  EXPECT_EQ(default_timeout_s(), 300);
  unsetenv("FTCC_COMM_TIMEOUT_S");
  EXPECT_EQ(default_timeout_s(), 300);

  setenv("FTCC_ALLREDUCE_ALGO", "tree", 1);
  EXPECT_EQ(resolve_allreduce_algo(AllreduceAlgo::automatic, 1 << 30, 4), AllreduceAlgo::tree);
  EXPECT_EQ(resolve_allreduce_algo(AllreduceAlgo::ring, 8, 4), AllreduceAlgo::ring);  // explicit wins
  setenv("FTCC_ALLREDUCE_ALGO", "auto", 1);
  EXPECT_EQ(resolve_allreduce_algo(AllreduceAlgo::automatic, 1 << 30, 4), AllreduceAlgo::ring);
  unsetenv("FTCC_ALLREDUCE_ALGO");
  EXPECT_EQ(resolve_allreduce_algo(AllreduceAlgo::automatic, 8, 4), AllreduceAlgo::rhd);
  EXPECT_EQ(resolve_allreduce_algo(AllreduceAlgo::automatic, 16 * 1024, 4), AllreduceAlgo::tree);
}

// The measured rule (comm/allreduce.cpp, docs/collectives.md "Auto thresholds"), at each boundary.
TEST(AutoSelection, PicksTheMeasuredAlgorithmOnEachSideOfEveryThreshold) {
  constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
  struct Case {
    std::size_t bytes;
    int ranks;
    AllreduceAlgo want;
  };
  const Case cases[] = {
      // 2 ranks: rhd below 8 KiB, ring from there on (tree never).
      {8, 2, AllreduceAlgo::rhd}, {8 * KiB - 4, 2, AllreduceAlgo::rhd}, {8 * KiB, 2, AllreduceAlgo::ring},
      {64 * MiB, 2, AllreduceAlgo::ring},
      // 3 ranks (not a power of two): rhd < 512 B, tree < 256 KiB, then ring.
      {508, 3, AllreduceAlgo::rhd}, {512, 3, AllreduceAlgo::tree}, {256 * KiB - 4, 3, AllreduceAlgo::tree},
      {256 * KiB, 3, AllreduceAlgo::ring}, {64 * MiB, 7, AllreduceAlgo::ring},
      // 4 ranks: rhd < 4 KiB, tree < 128 KiB, rhd < 4 MiB, ring.
      {4 * KiB - 4, 4, AllreduceAlgo::rhd}, {4 * KiB, 4, AllreduceAlgo::tree}, {128 * KiB - 4, 4, AllreduceAlgo::tree},
      {128 * KiB, 4, AllreduceAlgo::rhd}, {4 * MiB - 4, 8, AllreduceAlgo::rhd}, {4 * MiB, 8, AllreduceAlgo::ring},
  };
  for (const auto& c : cases)
    EXPECT_EQ(select_allreduce_algo(c.bytes, c.ranks), c.want) << c.bytes << " bytes on " << c.ranks << " ranks";
}

// On one host (docs/collectives.md "Auto on one host"): shm, except 2 ranks with a CPU each from
// 256 KiB to 8 MiB (exclusive), where point-to-point measured faster.
TEST(AutoSelection, OneHostTakesPointToPointOnlyWhereItMeasuredFaster) {
  constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
  EXPECT_EQ(select_one_host_allreduce(256 * KiB - 4, 2, 2), AllreduceAlgo::shm);
  EXPECT_EQ(select_one_host_allreduce(256 * KiB, 2, 2), AllreduceAlgo::ring);
  EXPECT_EQ(select_one_host_allreduce(512 * KiB - 4, 2, 16), AllreduceAlgo::ring);
  EXPECT_EQ(select_one_host_allreduce(512 * KiB, 2, 2), AllreduceAlgo::rhd);
  EXPECT_EQ(select_one_host_allreduce(8 * MiB - 4, 2, 2), AllreduceAlgo::rhd);
  EXPECT_EQ(select_one_host_allreduce(8 * MiB, 2, 2), AllreduceAlgo::shm);
  EXPECT_EQ(select_one_host_allreduce(1 * MiB, 2, 1), AllreduceAlgo::shm);  // 2 ranks on one CPU
  for (int ranks : {3, 4, 8})
    for (std::size_t b : {std::size_t{8}, 1 * MiB, 64 * MiB})
      EXPECT_EQ(select_one_host_allreduce(b, ranks, 2), AllreduceAlgo::shm) << b << " bytes on " << ranks;
}

}  // namespace

// Sub-groups (comm/subgroup_transport.hpp): 6 ranks as a grid of 2 rows x 3 columns. Rows and
// columns run allreduces on their own Communicators between the world's, and a user tag used on
// the world and on a row at once never crosses over.
TEST(Subgroup, RowsAndColumnsOfAGrid) {
  run_ranks(6, [](Communicator& world) {
    const int r = world.rank(), row = r / 3, col = r % 3;
    Communicator rows(std::make_unique<SubgroupTransport>(world.transport(), std::vector<int>{3 * row, 3 * row + 1, 3 * row + 2}));
    Communicator cols(std::make_unique<SubgroupTransport>(world.transport(), std::vector<int>{col, col + 3}));
    EXPECT_EQ(rows.rank(), col);
    EXPECT_EQ(rows.size(), 3);
    EXPECT_EQ(cols.rank(), row);
    for (int round = 0; round < 3; ++round) {
      std::int64_t v[3] = {r, 1, 100 * round};
      allreduce(rows, kInPlace, v, 3, DType::i64, ReduceOp::sum);
      EXPECT_EQ(v[0], 3 * (3 * row) + 3) << "row " << row;
      EXPECT_EQ(v[1], 3);
      std::int64_t w = r;
      allreduce(cols, kInPlace, &w, 1, DType::i64, ReduceOp::sum);
      EXPECT_EQ(w, 2 * col + 3) << "column " << col;
      std::int64_t all = r;
      allreduce(world, kInPlace, &all, 1, DType::i64, ReduceOp::sum);
      EXPECT_EQ(all, 15);
    }
    // The same user tag on the world and on the row, sent in one order and received in the other.
    if (col == 0) {
      const std::int32_t a = 1000 + r, b = 2000 + r;
      world.send(&a, 1, DType::i32, r + 1, 5);
      rows.send(&b, 1, DType::i32, 1, 5);
    } else if (col == 1) {
      std::int32_t a = 0, b = 0;
      rows.recv(&b, 1, DType::i32, 0, 5);
      world.recv(&a, 1, DType::i32, r - 1, 5);
      EXPECT_EQ(a, 1000 + r - 1);
      EXPECT_EQ(b, 2000 + r - 1);
    }
  });
}

TEST(Subgroup, RefusesMembersThatAreNotRanks) {
  run_ranks(2, [](Communicator& world) {
    EXPECT_THROW(SubgroupTransport(world.transport(), {0, 5}), ftcc::Error);
    EXPECT_THROW(SubgroupTransport(world.transport(), {1 - world.rank()}), ftcc::Error);  // not a member itself
    EXPECT_THROW(SubgroupTransport(world.transport(), {0, 1, 0}), ftcc::Error);
  });
}
