// Replica verification's parts (train/replica_verifier.hpp, train/bit_flip.hpp): the digest sees
// every single flipped bit, the vote names the outvoted ranks and the positions without a majority,
// and the bitflip fault flips exactly the bit it names.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/tensor.hpp"
#include "ftcc/train/bit_flip.hpp"
#include "ftcc/train/replica_verifier.hpp"

namespace ft = ftcc::train;

namespace {

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 37 + 11) & 0xff);
  return b;
}

TEST(StateDigest, EverySingleBitFlipChangesIt) {
  for (std::size_t n : {1U, 7U, 8U, 37U, 64U, 1000U}) {  // whole words and a tail
    auto b = pattern(n);
    const std::uint64_t d = ft::state_digest(b);
    for (std::size_t bit = 0; bit < 8 * n; ++bit) {
      b[bit / 8] ^= static_cast<std::byte>(1U << (bit % 8));
      EXPECT_NE(ft::state_digest(b), d) << n << " bytes, bit " << bit;
      b[bit / 8] ^= static_cast<std::byte>(1U << (bit % 8));
    }
    EXPECT_EQ(ft::state_digest(b), d);
  }
}

TEST(StateDigest, OrderAndLengthCount) {
  auto a = pattern(64);
  auto b = a;
  std::swap(b[0], b[8]);  // two words swapped: same words, another order
  EXPECT_NE(ft::state_digest(a), ft::state_digest(b));
  const std::vector<std::byte> z8(8), z16(16);  // zeros of two lengths
  EXPECT_NE(ft::state_digest(z8), ft::state_digest(z16));
  EXPECT_NE(ft::state_digest(std::span<const std::byte>{}), ft::state_digest(std::vector<std::byte>(1)));
}

TEST(ReplicaVote, AllAlikeIsClean) {
  const std::vector<std::uint64_t> d{5, 5, 5, 5};
  EXPECT_TRUE(ft::vote(d, std::vector<int>{0, 0, 0, 0}).clean());
  // Different positions hold different units: they are never compared with each other.
  EXPECT_TRUE(ft::vote(std::vector<std::uint64_t>{1, 2, 1, 2}, std::vector<int>{0, 1, 0, 1}).clean());
  // A position held by one rank has nothing to compare with.
  EXPECT_TRUE(ft::vote(std::vector<std::uint64_t>{1, 2}, std::vector<int>{0, 1}).clean());
}

TEST(ReplicaVote, StrictMajorityNamesTheOdd) {
  auto v = ft::vote(std::vector<std::uint64_t>{7, 9, 7}, std::vector<int>{0, 0, 0});
  EXPECT_EQ(v.odd, (std::vector<int>{1}));
  EXPECT_EQ(v.undecided, 0);
  // Two odd ranks with different digests among five: both outvoted.
  v = ft::vote(std::vector<std::uint64_t>{7, 1, 7, 2, 7}, std::vector<int>{0, 0, 0, 0, 0});
  EXPECT_EQ(v.odd, (std::vector<int>{1, 3}));
  // Hybrid grid 3 replicas x 2: rank 3 (position 1) differs from ranks 1 and 5.
  v = ft::vote(std::vector<std::uint64_t>{4, 8, 4, 6, 4, 8}, std::vector<int>{0, 1, 0, 1, 0, 1});
  EXPECT_EQ(v.odd, (std::vector<int>{3}));
  // An idle rank (-1) takes no part.
  v = ft::vote(std::vector<std::uint64_t>{3, 3, 4, 0}, std::vector<int>{0, 0, 0, -1});
  EXPECT_EQ(v.odd, (std::vector<int>{2}));
}

TEST(ReplicaVote, NoStrictMajorityIsUndecided) {
  auto v = ft::vote(std::vector<std::uint64_t>{1, 2}, std::vector<int>{0, 0});
  EXPECT_TRUE(v.odd.empty());
  EXPECT_EQ(v.undecided, 1);
  v = ft::vote(std::vector<std::uint64_t>{1, 1, 2, 2}, std::vector<int>{0, 0, 0, 0});  // 2 against 2
  EXPECT_TRUE(v.odd.empty());
  EXPECT_EQ(v.undecided, 1);
  v = ft::vote(std::vector<std::uint64_t>{1, 2, 3}, std::vector<int>{0, 0, 0});  // all differ
  EXPECT_EQ(v.undecided, 1);
  // Each position votes alone: position 0 (ranks 0, 2, 4) outvotes rank 4, position 1 (ranks 1, 3, 5) rank 1.
  v = ft::vote(std::vector<std::uint64_t>{1, 5, 1, 6, 9, 6}, std::vector<int>{0, 1, 0, 1, 0, 1});
  EXPECT_EQ(v.odd, (std::vector<int>{1, 4}));
  EXPECT_EQ(v.undecided, 0);
  // One position decided, another not: both reported.
  v = ft::vote(std::vector<std::uint64_t>{1, 5, 1, 6, 9, 5, 1, 7}, std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1});
  EXPECT_EQ(v.odd, (std::vector<int>{4}));
  EXPECT_EQ(v.undecided, 1);
  v = ft::vote(std::vector<std::uint64_t>{1, 5, 2, 6}, std::vector<int>{0, 1, 0, 1});
  EXPECT_EQ(v.undecided, 2);
}

TEST(BitFlip, FlipsExactlyTheBitNamed) {
  auto t = ftcc::tensor::Tensor::full({2, 3}, 1.5);
  ft::flip_bit(t, 4, 20);
  auto v = t.to_vector();
  for (int i = 0; i < 6; ++i) {
    if (i == 4) continue;
    EXPECT_EQ(v[static_cast<std::size_t>(i)], 1.5F);
  }
  std::uint32_t was, now;
  const float one_and_half = 1.5F;
  std::memcpy(&was, &one_and_half, 4);
  std::memcpy(&now, &v[4], 4);
  EXPECT_EQ(was ^ now, 1U << 20);
  ft::flip_bit(t, 4, 20);  // twice: back
  EXPECT_EQ(t.to_vector()[4], 1.5F);
  EXPECT_THROW(ft::flip_bit(t, 6, 0), ftcc::InvalidArgument);
  EXPECT_THROW(ft::flip_bit(t, 0, 32), ftcc::InvalidArgument);
}

TEST(BitFlip, TargetsTheLargestElement) {
  auto t = ftcc::tensor::Tensor::zeros({5});
  t.data()[3] = -4.0F;
  t.data()[1] = 2.0F;
  EXPECT_EQ(ft::flip_target_element(t), 3);
  EXPECT_EQ(ft::flip_target_element(ftcc::tensor::Tensor::zeros({4})), 0);
}

}  // namespace
