// The settling of verdicts (train/verdict_exchange.hpp): what every survivor learns from the
// allreduce (max) of the words each rank encodes, whoever knew the verdict.
#include "ftcc/train/verdict_exchange.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace ft = ftcc::train;

namespace {

// The allreduce(max) of the ranks' words.
std::vector<std::int64_t> max_of(const std::vector<std::vector<std::int64_t>>& all) {
  std::vector<std::int64_t> out = all.front();
  for (const auto& w : all)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], w[i]);
  return out;
}

// A group of 4 whose original ranks are 0, 2, 5, 7 (two were lost before).
const std::vector<int> kMembers{0, 2, 5, 7};

TEST(VerdictExchange, NothingToSettle) {
  std::vector<std::vector<std::int64_t>> all;
  for (int r = 0; r < 4; ++r) all.push_back(ft::encode_verdict(nullptr, kMembers, r, {20, -1, -1}));
  const ft::SettledVerdict v = ft::decode_verdict(max_of(all), kMembers);
  EXPECT_EQ(v.number, -1);
  EXPECT_FALSE(v.rollback);
  EXPECT_TRUE(v.outvoted.empty());
  EXPECT_FALSE(v.evicts);
  EXPECT_EQ(v.writer, 0);
  EXPECT_EQ(v.fate, std::vector<ft::Fate>(4, ft::Fate::stays));
  EXPECT_TRUE(v.changed_at_rest.empty());
}

// Original rank 5 outvoted at step 30; ranks 0 and 3 of the group missed the check (their
// allgather failed), rank 1 is a newcomer without a verified state: every rank learns the verdict,
// the rollback goes to the step the holders name, rank 5 is named by its original rank.
TEST(VerdictExchange, AVerdictSomeRanksMissed) {
  const ft::PendingVerdict held{.number = 3, .step = 30, .undecided = 0, .rollback = true, .odd = {5}};
  const auto v = ft::decode_verdict(max_of({ft::encode_verdict(nullptr, kMembers, 0, {20, -1, -1}),
                                             ft::encode_verdict(&held, kMembers, 1, {-1, -1, -1}),
                                             ft::encode_verdict(&held, kMembers, 2, {20, -1, -1}),
                                             ft::encode_verdict(nullptr, kMembers, 3, {20, -1, -1})}),
                                    kMembers);
  EXPECT_EQ(v.number, 3);
  EXPECT_EQ(v.step, 30);
  EXPECT_EQ(v.rollback_to, 20);
  EXPECT_TRUE(v.rollback);
  EXPECT_EQ(v.outvoted, std::vector<int>{5});
  EXPECT_EQ(v.fate[2], ft::Fate::outvoted);
  EXPECT_EQ(v.fate[0], ft::Fate::stays);
  EXPECT_EQ(v.writer, 0);
  EXPECT_FALSE(v.evicts);
}

// The newcomer alone found the mismatch (its revoke cut the others' allgather short): the step to
// roll back to still comes from the ranks that hold a verified state, which did not learn the
// verdict. A rank whose last check was cut short names an older step: the newest wins.
TEST(VerdictExchange, OnlyTheNewcomerFoundIt) {
  const ft::PendingVerdict found{.number = 1, .step = 22, .undecided = 1, .rollback = true};
  auto v = ft::decode_verdict(max_of({ft::encode_verdict(nullptr, kMembers, 0, {20, -1, -1}),
                                       ft::encode_verdict(nullptr, kMembers, 1, {20, -1, -1}),
                                       ft::encode_verdict(&found, kMembers, 2, {-1, -1, -1}),
                                       ft::encode_verdict(nullptr, kMembers, 3, {10, -1, -1})}),
                              kMembers);
  EXPECT_EQ(v.number, 1);
  EXPECT_EQ(v.step, 22);
  EXPECT_TRUE(v.rollback);
  EXPECT_EQ(v.rollback_to, 20);
  EXPECT_EQ(v.undecided, 1);
  EXPECT_TRUE(v.outvoted.empty());
  EXPECT_EQ(v.last_undecided_at, -1);
  // The same mismatch again after the rollback: the newcomer learns that it repeats (the step of
  // the last verdict without a majority) from the others, who settled the first.
  v = ft::decode_verdict(max_of({ft::encode_verdict(nullptr, kMembers, 0, {20, 22, -1}),
                                 ft::encode_verdict(&found, kMembers, 2, {-1, -1, -1})}),
                         kMembers);
  EXPECT_EQ(v.last_undecided_at, 22);
  // Nobody holds one: -1, which the driver treats as a broken invariant.
  v = ft::decode_verdict(ft::encode_verdict(&found, kMembers, 2, {-1, -1, -1}), kMembers);
  EXPECT_EQ(v.rollback_to, -1);
}

// The outvoted rank is the group's rank 0: the lowest rank that stays reports it. A straggler
// eviction alone rolls nobody back.
TEST(VerdictExchange, WriterAndEviction) {
  const ft::PendingVerdict odd0{.number = 1, .step = 10, .rollback = true, .odd = {0}};
  auto v = ft::decode_verdict(ft::encode_verdict(&odd0, kMembers, 1, {0, -1, -1}), kMembers);
  EXPECT_EQ(v.writer, 1);
  const ft::PendingVerdict slow{.number = 2, .step = 40, .odd = {}, .straggler = 7};
  v = ft::decode_verdict(ft::encode_verdict(&slow, kMembers, 0, {40, -1, -1}), kMembers);
  EXPECT_TRUE(v.evicts);
  EXPECT_FALSE(v.rollback);
  EXPECT_EQ(v.fate[3], ft::Fate::evicted);
  EXPECT_TRUE(v.outvoted.empty());
}

// State found changed at rest: known to its own rank only, learned by all, with the latest step.
TEST(VerdictExchange, ChangedAtRest) {
  const auto v = ft::decode_verdict(max_of({ft::encode_verdict(nullptr, kMembers, 0, {20, -1, -1}),
                                             ft::encode_verdict(nullptr, kMembers, 1, {20, -1, 26}),
                                             ft::encode_verdict(nullptr, kMembers, 2, {20, -1, -1}),
                                             ft::encode_verdict(nullptr, kMembers, 3, {20, -1, 0})}),
                                    kMembers);
  EXPECT_EQ(v.changed_at_rest, (std::vector<int>{2, 7}));
  EXPECT_EQ(v.changed_at_step, 26);
  EXPECT_EQ(v.number, -1);  // no verdict to apply besides
}

TEST(VerdictExchange, WrongLengthIsAnInvariant) {
  const auto w = ft::encode_verdict(nullptr, kMembers, 0, {20, -1, -1});
  EXPECT_ANY_THROW(ft::decode_verdict(std::span(w).first(w.size() - 1), kMembers));
}

}  // namespace
