#include "ftcc/data/datasets.hpp"

#include <cstdlib>
#include <filesystem>

#include "ftcc/base/error.hpp"
#include "ftcc/data/table.hpp"

namespace ftcc::data {

std::string default_dataset_dir() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  if (const char* env = std::getenv("FTCC_DATA_DIR"); env != nullptr && *env != '\0') return env;
  namespace fs = std::filesystem;
  for (const char* dir : {FTCC_INSTALLED_DATASET_DIR, FTCC_SOURCE_DATASET_DIR})
    if (fs::exists(fs::path(dir) / "digits.csv.gz")) return dir;
  return FTCC_SOURCE_DATASET_DIR;
}

Dataset load_diabetes(const std::string& dir) {
  Table x = read_csv(dir + "/diabetes_data_raw.csv.gz");
  Table y = read_csv(dir + "/diabetes_target.csv.gz");
  if (x.cols != 10 || y.cols != 1 || x.rows != y.rows)
    throw FormatError("diabetes in '" + dir + "': expected 442 x 10 features and 442 targets, got " +
                      std::to_string(x.rows) + " x " + std::to_string(x.cols) + " and " + std::to_string(y.rows) +
                      " x " + std::to_string(y.cols));
  return Dataset{columns(x, 0, 10), columns(y, 0, 1), {}};
}

Dataset load_digits(const std::string& dir) {
  Table t = read_csv(dir + "/digits.csv.gz");
  if (t.cols != 65) throw FormatError("digits in '" + dir + "': expected 65 columns, got " + std::to_string(t.cols));
  Dataset d;
  d.features = columns(t, 0, 64);
  for (std::int64_t r = 0; r < t.rows; ++r) {
    double v = t.at(r, 64);
    if (v != static_cast<int>(v) || v < 0 || v > 9)
      throw FormatError("digits in '" + dir + "': row " + std::to_string(r + 1) + " has label " + std::to_string(v));
    d.labels.push_back(static_cast<int>(v));
  }
  d.targets = one_hot(d.labels, 10);
  return d;
}

}  // namespace ftcc::data
