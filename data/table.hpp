// data/table.hpp: readers for numeric tables: CSV (also gzip-compressed, through zlib) and NumPy
// .npy (float32/float64, C order, format versions 1-3); a writer for .npy.
//
// CSV: one row per line, fields separated by commas or by runs of spaces/tabs (the delimiter is
// detected from the first data line unless given); '#' starts a comment line; an optional header
// line is skipped on request. Every row must have the same number of fields, every field must be a
// number: anything else throws data::FormatError with path, line and field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/tensor.hpp"

namespace ftcc::data {

// A data file that cannot be read as what it claims to be.
class FormatError : public ftcc::Error {
 public:
  using Error::Error;
};

struct Table {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> values;  // row-major
  double at(std::int64_t r, std::int64_t c) const { return values[static_cast<std::size_t>(r * cols + c)]; }
};

struct CsvOptions {
  char delimiter = 0;        // 0: detect (',' if the first data line has one, else whitespace)
  bool has_header = false;   // skip the first non-comment line
};

// Reads path; files ending in .gz (or any gzip file) are decompressed transparently.
Table read_csv(const std::string& path, const CsvOptions& options = {});

// A .npy file of 1 or 2 dimensions as a tensor of its own dtype (float32 or float64).
tensor::Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const tensor::Tensor& t);

// Columns [c0, c1) of a table as a float32 tensor [rows, c1 - c0].
tensor::Tensor columns(const Table& t, std::int64_t c0, std::int64_t c1);

}  // namespace ftcc::data
