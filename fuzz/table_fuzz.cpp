// fuzz/table_fuzz.cpp: the CSV reader (also through zlib: any gzip input is decompressed) and the
// .npy reader of data/table.hpp. The first byte picks the reader and the CSV options; the rest is
// the file. An accepted table must be consistent (rows x cols values).
#include <cstdint>

#include "ftcc/base/error.hpp"
#include "ftcc/data/table.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  const std::string path = ftcc::fuzz::write_file((mode & 1) ? "in.npy" : "in.csv", data + 1, size - 1);
  try {
    if (mode & 1) {
      const auto t = ftcc::data::read_npy(path);
      (void)t.numel();
    } else {
      ftcc::data::CsvOptions o;
      o.has_header = (mode & 2) != 0;
      o.delimiter = (mode & 4) ? ',' : ((mode & 8) ? ' ' : 0);
      const auto t = ftcc::data::read_csv(path, o);
      if (t.rows < 0 || t.cols < 0 || t.values.size() != static_cast<std::size_t>(t.rows * t.cols)) __builtin_trap();
      if (t.rows > 0 && t.cols > 0) (void)ftcc::data::columns(t, 0, t.cols);
    }
  } catch (const ftcc::Error&) {
  }
  return 0;
}
