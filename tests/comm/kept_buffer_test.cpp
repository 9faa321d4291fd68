// comm/kept_buffer.hpp: freed when its scope ends normally, kept (and still usable) when a failure
// unwinds it, freed when a failure is caught inside its scope.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "ftcc/comm/kept_buffer.hpp"

namespace {

using ftcc::comm::KeptBuffer;
using ftcc::comm::kept_buffer_count;

// Counts live instances, so "freed" is observed, not assumed.
struct Tracked {
  static inline int live = 0;
  std::array<std::int64_t, 4> words{};
  Tracked() { ++live; }
  ~Tracked() { --live; }
};

TEST(KeptBuffer, FreedWhenItsScopeEndsNormally) {
  const std::size_t before = kept_buffer_count();
  {
    const KeptBuffer<Tracked> b;
    EXPECT_EQ(Tracked::live, 1);
    EXPECT_EQ(b->words[3], 0);  // value-initialized
  }
  EXPECT_EQ(Tracked::live, 0);
  EXPECT_EQ(kept_buffer_count(), before);
}

TEST(KeptBuffer, KeptAndUsableWhenAFailureUnwindsIt) {
  const std::size_t before = kept_buffer_count();
  std::int64_t* words = nullptr;
  try {
    const KeptBuffer<Tracked> b;
    words = b->words.data();
    throw std::runtime_error("a collective failed");  // as comm::ProcessFailed would
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(Tracked::live, 1);
  EXPECT_EQ(kept_buffer_count(), before + 1);
  words[2] = 42;  // a late write, as an abandoned receive's: the memory is still ours (ASan checks it)
  EXPECT_EQ(words[2], 42);
  Tracked::live = 0;  // the kept one is never destroyed: reset the count for the other tests
}

TEST(KeptBuffer, FreedWhenTheFailureIsCaughtInsideItsScope) {
  const std::size_t before = kept_buffer_count();
  {
    const KeptBuffer<std::vector<double>> b(std::size_t{1000}, 1.5);
    EXPECT_EQ(b->size(), 1000u);
    EXPECT_EQ((*b)[999], 1.5);
    try {
      throw std::runtime_error("caught here");
    } catch (const std::runtime_error&) {
    }
  }
  EXPECT_EQ(kept_buffer_count(), before);
}

TEST(KeptBuffer, ConstructedDuringUnwindingIsFreedWhenItsOwnScopeEnds) {
  // A buffer made in a destructor that runs while another exception unwinds: only an exception
  // newer than the buffer keeps it.
  const std::size_t before = kept_buffer_count();
  struct MakesOne {
    ~MakesOne() { const KeptBuffer<Tracked> inner; }
  };
  try {
    const MakesOne m;
    throw std::runtime_error("unwinding");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(Tracked::live, 0);
  EXPECT_EQ(kept_buffer_count(), before);
}

}  // namespace
