#include "ftcc/data/datasets.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ftcc/base/error.hpp"
#include "ftcc/data/table.hpp"

namespace ftcc::data {

namespace {

namespace fs = std::filesystem;

// The folder of the file that holds this code: libftcc.so, or the executable it was linked into.
fs::path own_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&default_dataset_dir), &info) != 0 && info.dli_fname != nullptr &&
      std::strstr(info.dli_fname, ".so") != nullptr)
    return fs::absolute(info.dli_fname).parent_path();
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

bool has_datasets(const fs::path& dir) { return fs::exists(dir / "digits.csv.gz"); }

}  // namespace

std::string default_dataset_dir() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  if (const char* env = std::getenv("FTCC_DATA_DIR"); env != nullptr && *env != '\0') return env;
  const fs::path here = own_folder();
  fs::path installed;
  if (!here.empty()) {
    for (const char* rel : {FTCC_DATASETS_FROM_LIBDIR, FTCC_DATASETS_FROM_BINDIR}) {
      const fs::path dir = (here / rel).lexically_normal();
      if (installed.empty()) installed = dir;
      if (has_datasets(dir)) return dir.string();
    }
    // A program of the build folder (tests, tools): the source tree's copy.
    const fs::path build_root = FTCC_BUILD_ROOT;
    const auto [b, h] = std::mismatch(build_root.begin(), build_root.end(), here.begin(), here.end());
    if (b == build_root.end() && has_datasets(FTCC_SOURCE_DATASET_DIR)) return FTCC_SOURCE_DATASET_DIR;
  }
  return installed.empty() ? std::string(FTCC_DATASETS_FROM_BINDIR) : installed.string();
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
