#include "ftcc/train/training_data.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/data/datasets.hpp"
#include "ftcc/data/table.hpp"
#include "ftcc/tensor/random.hpp"

namespace ftcc::train {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::int64_t parse_positive(const std::string& spec, const std::string& field, const char* what) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  FTCC_REQUIRE(ec == std::errc() && p == field.data() + field.size() && v > 0)
      << "--dataset '" << spec << "': " << what << " '" << field << "' is not a positive integer "
      << "(expected synthetic:N:IN:OUT)";
  return v;
}

}  // namespace

SyntheticShape parse_synthetic_spec(const std::string& spec) {
  std::vector<std::string> f;
  size_t start = 0;
  for (;;) {
    auto pos = spec.find(':', start);
    f.push_back(spec.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  FTCC_REQUIRE(f.size() == 4 && f[0] == "synthetic") << "--dataset '" << spec << "': expected synthetic:N:IN:OUT";
  const auto n = parse_positive(spec, f[1], "N"), in = parse_positive(spec, f[2], "IN"),
             out = parse_positive(spec, f[3], "OUT");
  // Each array (inputs N x IN, targets N x OUT, the hidden map IN x OUT) at most 2^31 values;
  // the products are checked before they can overflow.
  constexpr std::int64_t kMaxValues = std::int64_t{1} << 31;
  for (const auto& [a, b, what] : {std::tuple{n, in, "N x IN"}, std::tuple{n, out, "N x OUT"}, std::tuple{in, out, "IN x OUT"}}) {
    std::int64_t prod = 0;
    FTCC_REQUIRE(!__builtin_mul_overflow(a, b, &prod) && prod <= kMaxValues)
        << "--dataset '" << spec << "' is too large: " << what << " = " << a << " x " << b
        << " values, at most 2^31 (2147483648) per array";
  }
  return {n, in, out};
}

namespace {

// Rows [lo, hi) of synthetic:N:IN:OUT into rows (IN features then OUT targets per row). Row i's
// values depend on i alone (Philox is counter-based), so any split of the rows gives the same bits.
void synthetic_rows(const SyntheticShape& shape, std::uint64_t seed, std::int64_t lo, std::int64_t hi, float* rows) {
  const auto [n, in, out] = shape;
  tensor::Philox xs(seed, 101), ws(seed, 102);
  // Normals by position in the stream (Philox::fill_standard_normal_fast), so row r's values are the
  // same whichever rank makes it.
  std::vector<float> w(static_cast<size_t>(in * out));
  ws.fill_standard_normal_fast(0, w);
  for (float& v : w) v /= std::sqrt(static_cast<float>(in));
  // y = tanh(x w^T), each sum in double in k order; the outputs of a row advance together (w
  // transposed, in double: exact), so their sums are independent chains the compiler vectorises
  // (the same sums, several times faster than one output at a time).
  std::vector<double> wt(w.size());
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t k = 0; k < in; ++k) wt[static_cast<size_t>(k * out + o)] = w[static_cast<size_t>(o * in + k)];
  std::vector<double> acc(static_cast<size_t>(out));
  for (std::int64_t r = lo; r < hi; ++r) {
    float* xr = rows + (r - lo) * (in + out);
    xs.fill_standard_normal_fast(static_cast<std::uint64_t>(r * in), std::span<float>(xr, static_cast<size_t>(in)));
    std::fill(acc.begin(), acc.end(), 0.0);
    double* a = acc.data();
    for (std::int64_t k = 0; k < in; ++k) {
      const double xk = xr[k];
      const double* wk = wt.data() + k * out;
      for (std::int64_t o = 0; o < out; ++o) a[o] += xk * wk[o];
    }
    for (std::int64_t o = 0; o < out; ++o) xr[in + o] = static_cast<float>(std::tanh(acc[static_cast<size_t>(o)]));
  }
}

// With `share`, each rank makes a 1/size share of the rows and an allgather assembles them.
data::Dataset synthetic(const std::string& spec, std::uint64_t seed, comm::Communicator* share) {
  const SyntheticShape shape = parse_synthetic_spec(spec);
  const auto [n, in, out] = shape;
  const std::int64_t parts = share != nullptr ? share->size() : 1, part = share != nullptr ? share->rank() : 0;
  const std::int64_t per = (n + parts - 1) / parts, width = in + out;
  // The allgather receives into `rows`. After a failure a receive that could not be cancelled may
  // still write there, so on that path the buffer is left allocated (the process goes on to a
  // recovery or an exit), as comm/'s own scratch buffers are.
  auto rows = std::make_unique<std::vector<float>>(static_cast<size_t>(per * parts * width));
  const std::int64_t lo = std::min(n, part * per), hi = std::min(n, lo + per);
  synthetic_rows(shape, seed, lo, hi, rows->data() + part * per * width);
  if (share != nullptr && parts > 1) {
    try {
      comm::allgather(*share, comm::kInPlace, rows->data(), static_cast<std::size_t>(per * width), comm::DType::f32);
    } catch (...) {
      (void)rows.release();
      throw;
    }
  }
  data::Dataset d;
  d.features = tensor::Tensor::empty({n, in});
  d.targets = tensor::Tensor::empty({n, out});
  float* x = d.features.data();
  float* y = d.targets.data();
  for (std::int64_t r = 0; r < n; ++r) {
    const float* src = rows->data() + r * width;
    std::copy(src, src + in, x + r * in);
    std::copy(src + in, src + width, y + r * out);
  }
  return d;
}

data::Dataset last_column_is_target(const tensor::Tensor& t, const std::string& path) {
  FTCC_REQUIRE(t.dim() == 2 && t.size(1) >= 2) << "--dataset '" << path << "': need a 2-D table with at least "
                                             << "two columns (features..., target)";
  const std::int64_t rows = t.size(0), cols = t.size(1);
  const auto v = t.to(tensor::DType::f32).to_vector();
  std::vector<float> x(static_cast<size_t>(rows * (cols - 1))), y(static_cast<size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c + 1 < cols; ++c) x[r * (cols - 1) + c] = v[r * cols + c];
    y[r] = v[r * cols + cols - 1];
  }
  data::Dataset d;
  d.features = tensor::Tensor::from_vector({rows, cols - 1}, std::span<const float>(x));
  d.targets = tensor::Tensor::from_vector({rows, 1}, std::span<const float>(y));
  return d;
}

}  // namespace

bool is_classification_dataset(const std::string& spec) { return spec == "digits"; }

TrainingData load_training_data(const std::string& spec, std::uint64_t seed, double held_out,
                                comm::Communicator* share) {
  TrainingData out;
  out.name = spec;
  data::Dataset all;
  if (spec == "diabetes") {
    all = data::load_diabetes();
  } else if (spec == "digits") {
    all = data::load_digits();
    out.classification = is_classification_dataset(spec);
    out.classes = 10;
  } else if (spec.rfind("synthetic:", 0) == 0) {
    all = synthetic(spec, seed, share);
  } else if (ends_with(spec, ".csv") || ends_with(spec, ".csv.gz")) {
    FTCC_REQUIRE(std::filesystem::exists(spec)) << "--dataset '" << spec << "': no such file";
    const auto table = data::read_csv(spec);
    all = last_column_is_target(data::columns(table, 0, table.cols), spec);
  } else if (ends_with(spec, ".npy")) {
    FTCC_REQUIRE(std::filesystem::exists(spec)) << "--dataset '" << spec << "': no such file";
    all = last_column_is_target(data::read_npy(spec), spec);
  } else {
    throw ftcc::InvalidArgument("--dataset '" + spec +
                                "': unknown dataset; expected diabetes, digits, synthetic:N:IN:OUT, "
                                "a .csv / .csv.gz file or a .npy file");
  }
  auto [train, test] = data::train_test_split(all, held_out, seed);
  FTCC_REQUIRE(train.size() > 0 && test.size() > 0) << "--dataset '" << spec << "' has too few samples ("
                                                  << all.size() << ") for a train/held-out split";
  const auto scaler = data::Standardizer::fit(train.features);
  train.features = scaler.apply(train.features);
  test.features = scaler.apply(test.features);
  out.train = std::move(train);
  out.test = std::move(test);
  return out;
}

std::vector<std::int64_t> model_widths(const std::vector<std::int64_t>& layers, const TrainingData& td,
                                       const std::string& dataset) {
  std::vector<std::int64_t> widths = layers;
  if (widths.empty()) widths = {td.train.num_features(), 64, td.train.num_targets()};
  FTCC_REQUIRE(widths.front() == td.train.num_features())
      << "--layers starts with " << widths.front() << " but dataset '" << dataset << "' has "
      << td.train.num_features() << " features";
  FTCC_REQUIRE(widths.back() == td.train.num_targets())
      << "--layers ends with " << widths.back() << " but dataset '" << dataset << "' has "
      << td.train.num_targets() << " target columns";
  return widths;
}

}  // namespace ftcc::train
