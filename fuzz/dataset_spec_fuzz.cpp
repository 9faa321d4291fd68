// fuzz/dataset_spec_fuzz.cpp: the synthetic dataset spec (train/training_data.hpp), as fed by
// --dataset synthetic:N:IN:OUT. synthetic:2^32:2^32:2^32 used to overflow the size guard and
// segfault. Input: the text after "synthetic:". A spec that parses must have positive fields whose
// products fit the bound; small ones are also generated and split, and must give N samples.
#include <cstdint>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/train/training_data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string spec = "synthetic:" + std::string(reinterpret_cast<const char*>(data), size);
  try {
    const auto s = ftcc::train::parse_synthetic_spec(spec);
    if (s.n <= 0 || s.in <= 0 || s.out <= 0) __builtin_trap();
    if (s.n > (std::int64_t{1} << 31) / s.in || s.n > (std::int64_t{1} << 31) / s.out) __builtin_trap();
    if (s.n * s.in <= 4096 && s.n * s.out <= 4096 && s.in * s.out <= 4096) {
      const auto td = ftcc::train::load_training_data(spec, 1, 0.2);
      if (td.train.size() + td.test.size() != s.n) __builtin_trap();
    }
  } catch (const ftcc::Error&) {
  }
  return 0;
}
