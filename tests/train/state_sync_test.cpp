// train/state_sync.hpp on 3 ranks (tools/ftcc-run -n 3): root's tensors and position words reach
// every rank, a rank whose tensors have another shape is named on every rank, and newest_holder
// picks the lowest non-joined rank at the newest step. Under a real kill, sync_state runs in the
// recovery hooks of the docs example (tests/embed) and of ftcc-train's data-parallel trainer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/tensor/tensor.hpp"
#include "ftcc/train/state_sync.hpp"

namespace ftcc::train {
namespace {

using tensor::Tensor;

Tensor filled(const tensor::Shape& shape, float v) {
  Tensor t = Tensor::zeros(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = v + static_cast<float>(i);
  return t;
}

TEST(SyncState, RootsTensorsAndPositionReachEveryRank) {
  auto world = comm::Communicator::duplicate(MPI_COMM_WORLD);
  const int r = world.rank();
  const nn::NamedTensors state{{"0.weight", filled({3, 4}, 100.0f * r)}, {"0.weight.exp_avg", filled({5}, -1.0f * r)}};
  std::array<std::int64_t, 2> position{r, 10 * r};
  const std::int64_t sent = sync_state(world, 1, state, position);
  EXPECT_EQ(sent, 12 * 4 + 5 * 4 + 2 * 8);
  EXPECT_EQ(position, (std::array<std::int64_t, 2>{1, 10}));
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(state[0].second.data_as<float>()[i], 100.0f + i);
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(state[1].second.data_as<float>()[i], -1.0f + i);
}

TEST(SyncState, ARankWithAnotherShapeIsNamedOnEveryRank) {
  auto world = comm::Communicator::duplicate(MPI_COMM_WORLD);
  // The same bytes, another shape on the last rank: the transfer goes through, the check must not.
  const nn::NamedTensors state{
      {"w", world.rank() == world.size() - 1 ? filled({4, 3}, 0) : filled({3, 4}, 0)}};
  std::array<std::int64_t, 1> position{7};
  try {
    sync_state(world, 0, state, position);
    FAIL() << "a rank holding [4, 3] instead of [3, 4] was not noticed";
  } catch (const ftcc::Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("rank " + std::to_string(world.size() - 1) + " holds another state"));
  }
}

TEST(NewestHolder, TheLowestRankAtTheNewestStepThatDidNotJustJoin) {
  recovery::RecoveryEvent ev;
  ev.survivors = {0, 2, 3, 5};
  ev.committed = {6, 7, 7, 7};
  ev.committed_max = 7;
  EXPECT_EQ(newest_holder(ev), 1);
  ev.joined = {2};  // a hot spare now at new rank 1: it holds nothing yet
  EXPECT_EQ(newest_holder(ev), 2);
  ev.joined = {2, 3, 5};
  EXPECT_THROW(newest_holder(ev), ftcc::Error);
}

}  // namespace
}  // namespace ftcc::train
