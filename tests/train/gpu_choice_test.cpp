// train/gpu_choice.hpp: the ranks of a host take its GPUs in turn.
#include "ftcc/train/gpu_choice.hpp"

#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"

namespace ftcc::train {
namespace {

std::vector<int> all(const std::vector<std::string>& hosts, int devices) {
  std::vector<int> out;
  for (int me = 0; me < static_cast<int>(hosts.size()); ++me) out.push_back(gpu_for_rank(hosts, me, devices));
  return out;
}

TEST(GpuChoice, RanksOfOneHostTakeItsDevicesInTurn) {
  EXPECT_EQ(all({"a", "a", "a", "a"}, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(all({"a", "a", "a", "a", "a"}, 2), (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(all({"a", "a", "a"}, 1), (std::vector<int>{0, 0, 0}));
}

TEST(GpuChoice, CountsOnlyTheRanksOfTheSameHost) {
  // mpirun --map-by node puts ranks on the hosts in turn: each host's ranks still start at 0.
  EXPECT_EQ(all({"a", "b", "a", "b", "a", "b"}, 8), (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(all({"a", "a", "b", "b", "c"}, 2), (std::vector<int>{0, 1, 0, 1, 0}));
}

TEST(GpuChoice, ANewProcessComesAfterTheOriginalRanksOfItsHost) {
  // A process started by a respawn gets the next original rank: after the dead one it replaces.
  EXPECT_EQ(gpu_for_rank({"a", "a", "a", "a", "a"}, 4, 8), 4);
}

TEST(GpuChoice, RefusesWhatIsNotAProcessOrADevice) {
  EXPECT_THROW(gpu_for_rank({"a", "a"}, 2, 1), InternalError);
  EXPECT_THROW(gpu_for_rank({"a", "a"}, -1, 1), InternalError);
  EXPECT_THROW(gpu_for_rank({"a", "a"}, 0, 0), InternalError);
}

}  // namespace
}  // namespace ftcc::train
