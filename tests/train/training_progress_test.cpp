// The training position's two encodings (train/training_progress.hpp): collective words and
// checkpoint record fields, each a round trip of every field, and the record of an older format.
#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"
#include "ftcc/train/training_progress.hpp"

namespace ftcc::train {
namespace {

// Every field distinct, the digest with its top bit set (the words hold it as a negative int64).
TrainProgress sample() {
  return {.cursor = {3, 17}, .step = 1234, .samples_seen = 98765, .samples_digest = 0xfedcba9876543210ULL};
}

TEST(TrainProgress, WordsRoundTripEveryField) {
  const TrainProgress p = sample();
  const auto w = p.words();
  EXPECT_EQ(TrainProgress::from_words(w.data()), p);
  // Each field lands in its own word: changing one field changes one word.
  TrainProgress q = p;
  q.cursor.step += 1;
  const auto wq = q.words();
  int differing = 0;
  for (std::size_t i = 0; i < TrainProgress::kWords; ++i) differing += w[i] != wq[i];
  EXPECT_EQ(differing, 1);
}

TEST(TrainProgress, RecordRoundTripEveryField) {
  const TrainProgress p = sample();
  nlohmann::json record{{"format", "x"}};
  p.write_to(record);
  EXPECT_EQ(record.at("samples_digest"), "fedcba9876543210");
  EXPECT_EQ(record.at("cursor_step"), 17);
  EXPECT_EQ(TrainProgress::read_from(record), p);
}

TEST(TrainProgress, OlderRecordWithoutDigestReadsZero) {
  nlohmann::json record{{"step", 5}, {"epoch", 1}, {"cursor_step", 2}, {"samples_seen", 320}};
  const TrainProgress p = TrainProgress::read_from(record);
  EXPECT_EQ(p.step, 5);
  EXPECT_EQ(p.cursor, (data::Cursor{1, 2}));
  EXPECT_EQ(p.samples_seen, 320);
  EXPECT_EQ(p.samples_digest, 0u);
}

TEST(TrainProgress, BadRecordsAreRefused) {
  nlohmann::json missing{{"step", 5}, {"epoch", 1}, {"samples_seen", 320}};
  EXPECT_THROW(TrainProgress::read_from(missing), nlohmann::json::exception);
  nlohmann::json wrong_type{{"step", "five"}, {"epoch", 1}, {"cursor_step", 2}, {"samples_seen", 320}};
  EXPECT_THROW(TrainProgress::read_from(wrong_type), nlohmann::json::exception);
  nlohmann::json bad_digest{{"step", 5}, {"epoch", 1}, {"cursor_step", 2}, {"samples_seen", 320},
                            {"samples_digest", "12g4"}};
  EXPECT_THROW(TrainProgress::read_from(bad_digest), ftcc::InvalidArgument);
}

TEST(TrainProgress, DescribeNamesEveryField) {
  EXPECT_EQ(sample().describe(), "step 1234 (epoch 3, batch 17), 98765 samples seen (digest fedcba9876543210)");
}

TEST(TrainProgress, AddAccumulatesTheTally) {
  TrainProgress p;
  p.add({10, 0xffffffffffffffffULL});
  p.add({5, 2});  // the digest is a sum modulo 2^64
  EXPECT_EQ(p.tally(), (data::SampleTally{15, 1}));
}

}  // namespace
}  // namespace ftcc::train
