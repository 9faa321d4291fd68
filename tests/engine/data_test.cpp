// data: CSV (plain, gzip, whitespace, header, errors), .npy round trip and errors, the shipped
// data sets, standardization, deterministic splits, and the sampler's exactly-once properties,
// including re-splitting an epoch over fewer ranks from a cursor in the middle of it, and the
// samples tally (count + digest) that checks it at run time.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "ftcc/data/datasets.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/data/table.hpp"
#include "test_util.hpp"

namespace ftcc::data {
namespace {

class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ftcc_data_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text, bool gz = false) {
    std::string p = (dir_ / name).string();
    if (gz) {
      gzFile f = gzopen(p.c_str(), "wb");
      gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
      gzclose(f);
    } else {
      std::ofstream(p, std::ios::binary) << text;
    }
    return p;
  }
  std::filesystem::path dir_;
};

TEST_F(DataFiles, CsvCommaWhitespaceHeaderAndGzip) {
  Table a = read_csv(write("a.csv", "# comment\n1,2.5,-3\n4, 5e1 ,6\r\n"));
  EXPECT_EQ(a.rows, 2);
  EXPECT_EQ(a.cols, 3);
  EXPECT_EQ(a.values, (std::vector<double>{1, 2.5, -3, 4, 50, 6}));
  Table b = read_csv(write("b.csv.gz", "x y\n1   2\n\t3 4\n", true), {.has_header = true});
  EXPECT_EQ(b.values, (std::vector<double>{1, 2, 3, 4}));
}

TEST_F(DataFiles, CsvErrorsSayWhere) {
  try {
    read_csv(write("bad.csv", "1,2\n3,x\n"));
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2 field 2: not a number: 'x'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_csv(write("ragged.csv", "1,2\n3\n")), FormatError);
  EXPECT_THROW(read_csv(write("empty.csv", "# nothing\n")), FormatError);
  EXPECT_THROW(read_csv((dir_ / "missing.csv").string()), FormatError);
  // A gzip stream cut in half is refused, not read as a shorter table.
  std::string p = write("cut.csv.gz", std::string(20000, '1') + "\n", true);
  std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
  EXPECT_THROW(read_csv(p), FormatError);
}

TEST_F(DataFiles, NpyRoundTripAndErrors) {
  tensor::Tensor t = test::random_tensor({5, 3}, 1, -1, 1, tensor::DType::f32);
  std::string p = (dir_ / "t.npy").string();
  write_npy(p, t);
  tensor::Tensor r = read_npy(p);
  EXPECT_EQ(r.shape(), t.shape());
  EXPECT_EQ(r.to_vector(), t.to_vector());
  tensor::Tensor d = test::random_tensor({7}, 2);
  write_npy(p, d);
  EXPECT_EQ(read_npy(p).to_vector_f64(), d.to_vector_f64());
  std::filesystem::resize_file(p, std::filesystem::file_size(p) - 4);
  EXPECT_THROW(read_npy(p), FormatError);
  EXPECT_THROW(read_npy(write("junk.npy", "not numpy at all")), FormatError);
}

TEST(Datasets, ShippedFilesHaveTheDocumentedShapes) {
  Dataset dia = load_diabetes();
  EXPECT_EQ(dia.features.shape(), (tensor::Shape{442, 10}));
  EXPECT_EQ(dia.targets.shape(), (tensor::Shape{442, 1}));
  EXPECT_FLOAT_EQ(dia.features.to_vector()[0], 59.0f);  // first patient's age
  EXPECT_FLOAT_EQ(dia.targets.to_vector()[0], 151.0f);
  Dataset dig = load_digits();
  EXPECT_EQ(dig.features.shape(), (tensor::Shape{1797, 64}));
  EXPECT_EQ(dig.targets.shape(), (tensor::Shape{1797, 10}));
  ASSERT_EQ(dig.labels.size(), 1797u);
  EXPECT_EQ(dig.labels[0], 0);
  std::vector<float> y = dig.targets.to_vector();
  for (std::size_t i = 0; i < 1797; ++i) EXPECT_EQ(y[i * 10 + static_cast<std::size_t>(dig.labels[i])], 1.0f);
}

TEST(Datasets, StandardizeSplitAndGather) {
  Dataset d = load_diabetes();
  auto [train, test] = train_test_split(d, 0.2, 3);
  EXPECT_EQ(train.size() + test.size(), 442);
  EXPECT_EQ(test.size(), 88);
  auto [train2, test2] = train_test_split(d, 0.2, 3);
  EXPECT_EQ(test.features.to_vector(), test2.features.to_vector());
  Standardizer s = Standardizer::fit(train.features);
  tensor::Tensor z = s.apply(train.features);
  std::vector<double> v = z.to_vector_f64();
  for (int j = 0; j < 10; ++j) {
    double m = 0, q = 0;
    for (std::int64_t i = 0; i < train.size(); ++i) m += v[i * 10 + j];
    m /= static_cast<double>(train.size());
    for (std::int64_t i = 0; i < train.size(); ++i) q += (v[i * 10 + j] - m) * (v[i * 10 + j] - m);
    EXPECT_NEAR(m, 0, 1e-6);
    EXPECT_NEAR(q / static_cast<double>(train.size()), 1, 1e-5);
  }
  // Constant columns (blank digit pixels) stay finite.
  Dataset dig = load_digits();
  for (float x : Standardizer::fit(dig.features).apply(dig.features).to_vector()) ASSERT_TRUE(std::isfinite(x));
  std::vector<std::int64_t> ids{5, 0, 5};
  Batch b = d.gather(ids);
  EXPECT_EQ(b.x.shape(), (tensor::Shape{3, 10}));
  EXPECT_EQ(b.x.to_vector()[0], d.features.to_vector()[50]);
  EXPECT_EQ(b.y.to_vector()[1], d.targets.to_vector()[0]);
}

TEST(Sampler, EpochPermutationIsAPermutationAndDependsOnSeedAndEpoch) {
  auto p = epoch_permutation(1000, 7, 0);
  std::vector<std::int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(p, epoch_permutation(1000, 7, 0));
  EXPECT_NE(p, epoch_permutation(1000, 7, 1));
  EXPECT_NE(p, epoch_permutation(1000, 8, 0));
}

// Every id of the epoch exactly once, whatever world size each step is split over.
void expect_exactly_once(const DistributedSampler& s, std::int64_t epoch, const std::vector<int>& world_per_step) {
  std::map<std::int64_t, int> seen;
  Cursor c{epoch, 0};
  for (std::int64_t k = 0; k < s.steps_per_epoch(); ++k, c = s.next(c)) {
    int n = world_per_step[static_cast<std::size_t>(k)];
    std::vector<std::int64_t> batch = s.batch(c), joined;
    for (int r = 0; r < n; ++r) {
      auto ids = s.rank_ids(c, n, r);
      // Whole micro-batches only (except the batch's own tail).
      Range range = s.rank_range(k, n, r);
      EXPECT_TRUE(range.begin % s.options().micro_batch == 0);
      joined.insert(joined.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(joined, batch) << "step " << k << " over " << n << " ranks";
    for (auto id : batch) ++seen[id];
  }
  const auto n = s.options().num_samples;
  std::int64_t expect = s.options().drop_last ? s.steps_per_epoch() * s.options().global_batch : n;
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), expect);
  for (auto [id, count] : seen) ASSERT_EQ(count, 1) << "sample " << id;
}

TEST(Sampler, UnionOverRanksIsTheBatchAndEachSampleOnce) {
  for (std::int64_t micro : {1, 4}) {
    DistributedSampler s({.num_samples = 103, .global_batch = 16, .seed = 5, .micro_batch = micro});
    EXPECT_EQ(s.steps_per_epoch(), 7);
    EXPECT_EQ(s.batch_size(6), 103 - 96);
    for (int n : {1, 2, 3, 5, 16, 17}) expect_exactly_once(s, 2, std::vector<int>(7, n));
  }
  DistributedSampler d({.num_samples = 103, .global_batch = 16, .seed = 5, .drop_last = true});
  EXPECT_EQ(d.steps_per_epoch(), 6);
  expect_exactly_once(d, 0, std::vector<int>(6, 3));
}

TEST(Sampler, ResplitOverFewerRanksMidEpoch) {
  // 4 ranks train steps 0..2, rank 3 dies during step 3: the survivors recompute step 3 (the
  // cursor of the first uncommitted batch) and the rest of the epoch over 3 ranks; then 2.
  DistributedSampler s({.num_samples = 442, .global_batch = 32, .seed = 11, .micro_batch = 2});
  std::vector<int> worlds(static_cast<std::size_t>(s.steps_per_epoch()), 4);
  for (std::size_t k = 3; k < worlds.size(); ++k) worlds[k] = k < 9 ? 3 : 2;
  expect_exactly_once(s, 1, worlds);
  // The re-split keeps micro-batches whole: the same micro-batch ids exist for 4 and 3 ranks.
  std::set<std::vector<std::int64_t>> mb4, mb3;
  Cursor c{1, 3};
  auto batch = s.batch(c);
  for (std::size_t i = 0; i < batch.size(); i += 2) mb4.insert({batch[i], batch[i + 1]});
  for (int r = 0; r < 3; ++r) {
    auto ids = s.rank_ids(c, 3, r);
    ASSERT_EQ(ids.size() % 2, 0u);
    for (std::size_t i = 0; i < ids.size(); i += 2) mb3.insert({ids[i], ids[i + 1]});
  }
  EXPECT_EQ(mb3, mb4);
}

TEST(Sampler, CopiesGiveTheSameOrder) {
  DistributedSampler a({.num_samples = 50, .global_batch = 8, .seed = 3});
  std::vector<std::int64_t> first = a.batch({2, 1});
  DistributedSampler b = a;
  DistributedSampler c({.num_samples = 50, .global_batch = 8, .seed = 4});
  EXPECT_NE(c.batch({2, 1}), first);
  c = a;
  EXPECT_EQ(b.batch({2, 1}), first);
  EXPECT_EQ(c.batch({2, 1}), first);
}

TEST(Sampler, CursorWrapsAndRejectsBadArguments) {
  DistributedSampler s({.num_samples = 10, .global_batch = 4, .seed = 1});
  EXPECT_EQ(s.next({0, 2}), (Cursor{1, 0}));
  EXPECT_EQ(s.next({0, 1}), (Cursor{0, 2}));
  EXPECT_THROW(s.rank_ids({0, 0}, 2, 2), InvalidArgument);
  EXPECT_THROW(s.batch({0, 3}), InvalidArgument);
  EXPECT_THROW(DistributedSampler({.num_samples = 10, .global_batch = 4, .micro_batch = 5}), InvalidArgument);
  // More ranks than micro-batches: some ranks get nothing, the union is still the batch.
  expect_exactly_once(s, 0, {9, 9, 9});
}

// The exactly-once check the trainers run: the ranks' tallies of what they fed, summed over ranks
// and steps (in doubles, as in a step's allreduce), equal expected_tally() of the final cursor; a
// skipped, repeated or wrong-epoch sample shows.
TEST(SampleTally, RanksTalliesSumToTheExpectedOneAndABugShows) {
  DistributedSampler s({.num_samples = 103, .global_batch = 16, .seed = 5, .micro_batch = 4});
  EXPECT_EQ(s.expected_tally({0, 0}), SampleTally{});
  SampleTally run;
  Cursor c{0, 0};
  const std::vector<int> worlds = {4, 4, 3, 3, 3, 2, 2};  // ranks die on the way
  for (int i = 0; i < 17; ++i, c = s.next(c)) {
    const int n = worlds[static_cast<std::size_t>(c.step)];
    std::vector<double> reduced(SampleTally::kDoubles, 0.0);
    for (int r = 0; r < n; ++r) {
      SampleTally mine;
      mine.add(c.epoch, s.rank_ids(c, n, r));
      std::vector<double> d(SampleTally::kDoubles);
      mine.to_doubles(d.data());
      for (std::size_t k = 0; k < d.size(); ++k) reduced[k] += d[k];
    }
    run += SampleTally::from_doubles(reduced.data());
  }
  EXPECT_EQ(c, (Cursor{2, 3}));
  EXPECT_EQ(run.count, 2 * 103 + 3 * 16);
  EXPECT_EQ(run, s.expected_tally(c));

  // One sample skipped and another repeated: same count, different digest.
  const auto b = s.batch({1, 2});
  SampleTally wrong = run;
  wrong.digest -= sample_mix(1, b[0]);
  wrong.digest += sample_mix(1, b[1]);
  EXPECT_EQ(wrong.count, run.count);
  EXPECT_NE(wrong, s.expected_tally(c));
  // The same sample in the wrong epoch.
  SampleTally shifted = run;
  shifted.digest += sample_mix(2, b[0]) - sample_mix(1, b[0]);
  EXPECT_NE(shifted, s.expected_tally(c));
  // A batch applied twice (a redone step counted again).
  SampleTally twice = run;
  twice.add(1, b);
  EXPECT_NE(twice, s.expected_tally(c));
  EXPECT_NE(twice.count, s.expected_tally(c).count);
}

TEST(SampleTally, DoublesCarryTheWrappingSumExactlyAndHexRoundTrips) {
  // Digests near 2^64 from many ranks: the limb sums in doubles rebuild the wrapping sum.
  std::vector<SampleTally> ranks;
  for (int r = 0; r < 300; ++r) ranks.push_back({r, ~std::uint64_t{0} - static_cast<std::uint64_t>(r)});
  std::vector<double> reduced(SampleTally::kDoubles, 0.0);
  SampleTally expect;
  for (const auto& t : ranks) {
    std::vector<double> d(SampleTally::kDoubles);
    t.to_doubles(d.data());
    for (std::size_t k = 0; k < d.size(); ++k) reduced[k] += d[k];
    expect += t;
  }
  EXPECT_EQ(SampleTally::from_doubles(reduced.data()), expect);
  EXPECT_EQ(digest_hex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(parse_digest_hex("fedcba9876543210"), 0xfedcba9876543210ull);
  EXPECT_THROW(parse_digest_hex("12"), InvalidArgument);
  EXPECT_THROW(parse_digest_hex("xyz4567890123456"), InvalidArgument);
}

TEST(SampleTally, ExpectedTallyWithDropLastCountsOnlyTheBatches) {
  DistributedSampler d({.num_samples = 103, .global_batch = 16, .seed = 5, .drop_last = true});
  SampleTally run;
  for (Cursor c{0, 0}; c.epoch < 2; c = d.next(c)) run.add(c.epoch, d.batch(c));
  EXPECT_EQ(run.count, 2 * 96);
  EXPECT_EQ(run, d.expected_tally({2, 0}));
}

}  // namespace
}  // namespace ftcc::data
