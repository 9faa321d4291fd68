// tests/train/tp_shard_test.cpp: Megatron slices (train/tp_shard.hpp) and re-splitting a model
// over fewer ranks (4 -> 3 -> 2), without MPI.
#include "ftcc/train/tp_shard.hpp"

#include <gtest/gtest.h>

#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/sgd.hpp"

using namespace ftcc;
using namespace ftcc::train;

namespace {
nn::NamedTensors full_list(nn::Module& m, optim::Optimizer& o) {
  auto l = m.named_parameters();
  for (auto& nt : o.state_dict()) l.push_back(nt);
  return l;
}
}  // namespace

TEST(TpShard, SliceKinds) {
  // 5 layers: pairs (0,1), (2,3), layer 4 unpaired.
  EXPECT_EQ(slice_kind("0.weight", 5), SliceKind::rows);
  EXPECT_EQ(slice_kind("0.bias", 5), SliceKind::rows);
  EXPECT_EQ(slice_kind("2.weight", 5), SliceKind::cols);
  EXPECT_EQ(slice_kind("2.bias", 5), SliceKind::full);
  EXPECT_EQ(slice_kind("4.weight.momentum_buffer", 5), SliceKind::rows);
  EXPECT_EQ(slice_kind("6.weight.exp_avg", 5), SliceKind::cols);
  EXPECT_EQ(slice_kind("8.weight", 5), SliceKind::full);
  EXPECT_EQ(slice_kind("step", 5), SliceKind::full);
  EXPECT_EQ(min_split_width({64, 96, 64, 48, 10}), 48);
}

TEST(TpShard, ResplitFourThreeTwoRoundTrips) {
  // Shards of a model for 4 ranks assemble into the full model; sliced again for 3 and 2 ranks
  // (64 is not divisible by 3: slices of 21/21/22), the pieces still assemble into the same bits.
  const int L = 4;
  auto model = nn::mlp({8, 64, 12, 64, 3}, nn::Activation::ReLU, 7);
  optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  auto src = full_list(*model, opt);
  for (auto& [name, t] : opt.state_dict())
    if (t.dtype() == tensor::DType::f32)
      for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(i % 97) * 0.5f;
  const auto want = nn::pack_bytes(src);
  auto other = nn::mlp({8, 64, 12, 64, 3}, nn::Activation::ReLU, 99);
  optim::SGD other_opt(other->named_parameters(), {.lr = 0.1, .momentum = 0.9});
  auto dst = full_list(*other, other_opt);
  for (int n : {4, 3, 2}) {
    std::size_t total = 0;
    for (int r = 0; r < n; ++r) {
      std::vector<std::byte> b(shard_bytes(src, L, n, r));
      total += b.size();
      full_to_shard(src, L, n, r, b);
      shard_to_full(dst, L, n, r, b);
    }
    EXPECT_EQ(nn::pack_bytes(dst), want) << n << " ranks";
    EXPECT_GT(total, want.size() / static_cast<std::size_t>(n)) << "replicated biases and step are in every shard";
    src = dst;  // the next split starts from the assembled model
  }
  EXPECT_EQ(shard_shape("0.weight", model->named_parameters()[0].second, L, 3, 2), (tensor::Shape{22, 8}));
  EXPECT_EQ(shard_shape("2.weight", model->named_parameters()[2].second, L, 3, 0), (tensor::Shape{12, 21}));
}
