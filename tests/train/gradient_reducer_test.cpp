// The gradient arena and the overlapped bucket allreduce (train/gradient_reducer.hpp), with ranks
// as threads over comm::MemoryWorld (no MPI): the layout, the bucket cut, and sums equal to the
// reference on every rank, a rank without data (no backward) included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ftcc/comm/memory_transport.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/train/gradient_reducer.hpp"

namespace ftcc::train {
namespace {

using tensor::Tensor;

Tensor data_of(int rank, std::int64_t rows, std::int64_t cols, int salt) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i + 1) * (rank + 1) + salt);
  return Tensor::from_vector({rows, cols}, v);
}

// This rank's gradient contribution: nothing for the last rank (no data this step).
void backward_of(nn::Module& model, int rank, int n) {
  if (rank == n - 1) return;
  tensor::mse_loss(model(data_of(rank, 5, 4, 0)), data_of(rank, 5, 3, 1)).backward();
}

TEST(GradientReducer, ArenaInReverseOrderCutIntoWholeTensorBuckets) {
  auto model = nn::mlp({4, 8, 3}, nn::Activation::ReLU, 7);
  const auto params = model->named_parameters();  // 0.weight 32, 0.bias 8, 2.weight 24, 2.bias 3
  GradientReducer r(params, 16 * sizeof(float));
  // Each gradient padded to 16 floats (64 bytes): 3 -> 16, 24 -> 32, 8 -> 16, 32 -> 32.
  ASSERT_EQ(r.numel(), 96u);
  EXPECT_EQ(r.buckets(), 4u);  // {2.bias}, {2.weight} (over the limit alone), {0.bias}, {0.weight}
  const float* base = r.arena().data();
  EXPECT_EQ(params[3].second.grad().data(), base + 0);
  EXPECT_EQ(params[2].second.grad().data(), base + 16);
  EXPECT_EQ(params[1].second.grad().data(), base + 48);
  EXPECT_EQ(params[0].second.grad().data(), base + 64);
  for (const auto& [name, p] : params)
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.grad().data()) % 64, reinterpret_cast<std::uintptr_t>(base) % 64) << name;
  GradientReducer one(nn::mlp({4, 8, 3}, nn::Activation::ReLU, 7)->named_parameters(), 1 << 20);
  EXPECT_EQ(one.buckets(), 1u);
}

TEST(GradientReducer, OverlappedAndBlockingSumsEqualTheReferenceOnEveryRank) {
  constexpr int n = 3;
  // The reference: every rank's contribution computed apart, summed in double.
  std::vector<double> ref;
  for (int rank = 0; rank < n; ++rank) {
    auto m = nn::mlp({4, 8, 3}, nn::Activation::ReLU, 7);
    backward_of(*m, rank, n);
    std::vector<float> g = nn::flatten_f32(nn::gradients_of(m->named_parameters()));
    ref.resize(g.size(), 0.0);
    for (std::size_t i = 0; i < g.size(); ++i) ref[i] += g[i];
  }
  auto world = comm::MemoryWorld::create(n);
  std::vector<std::thread> threads;
  std::exception_ptr first;
  std::mutex mu;
  std::vector<std::vector<float>> overlapped(n), blocking(n);
  for (int rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] {
      try {
        comm::Communicator c(world->endpoint(rank), comm::CommOptions{30});
        auto m = nn::mlp({4, 8, 3}, nn::Activation::ReLU, 7);
        GradientReducer r(m->named_parameters(), 16 * sizeof(float));
        for (int round = 0; round < 2; ++round) {  // the second round reuses the arena and the thread
          m->zero_grad();
          r.begin_overlap(c);
          backward_of(*m, rank, n);
          EXPECT_TRUE(r.finish_overlap());
          // Overlap happened: every bucket started from backward's hooks, except on the rank that
          // ran no backward (it starts them all in finish_overlap).
          EXPECT_EQ(r.started_during_backward(), rank == n - 1 ? 0u : r.buckets()) << "rank " << rank;
        }
        overlapped[rank] = nn::flatten_f32(nn::gradients_of(m->named_parameters()));
        m->zero_grad();
        backward_of(*m, rank, n);
        EXPECT_TRUE(r.sum(c));
        blocking[rank] = nn::flatten_f32(nn::gradients_of(m->named_parameters()));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  for (int rank = 0; rank < n; ++rank) {
    ASSERT_EQ(overlapped[rank].size(), ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(overlapped[rank][i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << "rank " << rank << " element " << i;
      EXPECT_EQ(blocking[rank][i], overlapped[rank][i]) << "rank " << rank << " element " << i;
    }
  }
}

// tp's slices under dp,tp --deterministic: with slices_of, each tensor's fixed-point scale comes
// from its whole maximum, so a slice's elements get the whole tensor's bits. Here a tensor of 8
// holds 1e10 and small values: alone, the half without 1e10 would keep its small values exact
// (a fine scale); the whole tensor's scale rounds them to multiples of 2^-28.
TEST(GradientReducer, ExactSumOfSlicesHasTheWholeTensorsBits) {
  const std::vector<float> whole{1.2345678e-7f, -3.3e-6f, 0.5f, 1e10f, 7.77e-8f, 2.5e-7f, -1.1e-6f, 4.4e-6f};
  const auto reduce = [](const std::vector<float>& values, comm::Communicator* slices_of) {
    auto w = Tensor::zeros({1, static_cast<std::int64_t>(values.size())});
    w.requires_grad_(true);
    GradientReducer r({{"w", w}}, 0);
    std::vector<float> part(values);  // this rank's one contribution (of 2: the other is zero)
    part.resize(r.numel(), 0.0f);
    comm::Communicator self(comm::MemoryWorld::create(1)->endpoint(0), comm::CommOptions{30});
    EXPECT_TRUE(r.exact_sum(self, {part}, 2, slices_of));
    return r.snapshot();
  };
  auto expect = reduce(whole, nullptr);
  expect.resize(whole.size());
  EXPECT_NE(expect[0], whole[0]);  // rounded to the whole tensor's quantum
  auto world = comm::MemoryWorld::create(2);
  std::vector<std::vector<float>> got(2), alone(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      comm::Communicator c(world->endpoint(rank), comm::CommOptions{30});
      const std::vector<float> slice(whole.begin() + 4 * (1 - rank), whole.begin() + 4 * (2 - rank));  // rank 0: 2nd half
      got[rank] = reduce(slice, &c);
      alone[rank] = reduce(slice, nullptr);
      got[rank].resize(4);
      alone[rank].resize(4);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(got[1], std::vector<float>(expect.begin(), expect.begin() + 4));
  EXPECT_EQ(got[0], std::vector<float>(expect.begin() + 4, expect.end()));
  EXPECT_NE(alone[0], got[0]);  // without slices_of the half without 1e10 keeps a finer scale
}

}  // namespace
}  // namespace ftcc::train
