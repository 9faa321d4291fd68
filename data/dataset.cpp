#include "ftcc/data/dataset.hpp"

#include <cmath>
#include <cstring>

#include "ftcc/base/error.hpp"
#include "ftcc/data/sampler.hpp"

namespace ftcc::data {

Batch Dataset::gather(std::span<const std::int64_t> ids, tensor::Device device) const {
  const std::int64_t f = num_features(), t = num_targets();
  Tensor x = Tensor::empty({static_cast<std::int64_t>(ids.size()), f});
  Tensor y = Tensor::empty({static_cast<std::int64_t>(ids.size()), t});
  const float *fx = features.data(), *fy = targets.data();
  float *px = x.data(), *py = y.data();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    FTCC_CHECK(ids[i] >= 0 && ids[i] < size()) << "gather: sample id " << ids[i] << " of a dataset of " << size();
    std::memcpy(px + i * f, fx + ids[i] * f, sizeof(float) * static_cast<std::size_t>(f));
    std::memcpy(py + i * t, fy + ids[i] * t, sizeof(float) * static_cast<std::size_t>(t));
  }
  if (device != tensor::Device::CPU) return {x.to(device), y.to(device)};
  return {x, y};
}

Dataset Dataset::subset(std::span<const std::int64_t> ids) const {
  Batch b = gather(ids);
  Dataset out{b.x, b.y, {}};
  if (!labels.empty())
    for (auto i : ids) out.labels.push_back(labels[static_cast<std::size_t>(i)]);
  return out;
}

std::pair<Dataset, Dataset> train_test_split(const Dataset& d, double fraction, std::uint64_t seed) {
  FTCC_CHECK(fraction >= 0 && fraction <= 1) << "train_test_split: fraction " << fraction;
  std::vector<std::int64_t> perm = epoch_permutation(d.size(), seed, /*epoch=*/0);
  auto held = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(d.size())));
  std::span<const std::int64_t> all(perm);
  return {d.subset(all.subspan(held)), d.subset(all.first(held))};
}

Standardizer Standardizer::fit(const Tensor& x) {
  FTCC_CHECK(x.dim() == 2 && x.size(0) > 0) << "Standardizer::fit: [N, F] with N > 0 expected";
  const std::int64_t n = x.size(0), f = x.size(1);
  std::vector<double> v = x.to_vector_f64();
  Standardizer s;
  s.mean.assign(static_cast<std::size_t>(f), 0.0);
  s.stddev.assign(static_cast<std::size_t>(f), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < f; ++j) s.mean[j] += v[i * f + j];
  for (auto& m : s.mean) m /= static_cast<double>(n);
  // Two passes (mean, then squared deviations): no cancellation for large means.
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < f; ++j) s.stddev[j] += (v[i * f + j] - s.mean[j]) * (v[i * f + j] - s.mean[j]);
  for (auto& sd : s.stddev) sd = std::sqrt(sd / static_cast<double>(n));
  return s;
}

Tensor Standardizer::apply(const Tensor& x) const {
  FTCC_CHECK(x.dim() == 2 && static_cast<std::size_t>(x.size(1)) == mean.size())
      << "Standardizer::apply: " << x.size(1) << " features, fitted on " << mean.size();
  std::vector<double> v = x.to_vector_f64();
  const auto f = static_cast<std::size_t>(x.size(1));
  std::vector<double> sd(f);
  for (std::size_t j = 0; j < f; ++j) sd[j] = stddev[j] > 0 ? stddev[j] : 1.0;
  for (std::size_t row = 0; row < v.size(); row += f)  // by rows and columns: no division per element
    for (std::size_t j = 0; j < f; ++j) v[row + j] = (v[row + j] - mean[j]) / sd[j];
  return Tensor::from_vector(x.shape(), std::span<const double>(v), tensor::DType::f32);
}

Tensor one_hot(std::span<const int> labels, int classes) {
  Tensor t = Tensor::zeros({static_cast<std::int64_t>(labels.size()), classes});
  float* p = t.data();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    FTCC_CHECK(labels[i] >= 0 && labels[i] < classes) << "one_hot: label " << labels[i] << " outside [0, " << classes << ")";
    p[i * static_cast<std::size_t>(classes) + static_cast<std::size_t>(labels[i])] = 1.0f;
  }
  return t;
}

std::vector<int> argmax_rows(const Tensor& outputs) {
  FTCC_CHECK(outputs.dim() == 2) << "argmax_rows: 2-D tensor expected";
  std::vector<float> v = outputs.to_vector();
  const std::int64_t n = outputs.size(0), c = outputs.size(1);
  std::vector<int> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    int best = 0;
    for (std::int64_t j = 1; j < c; ++j)
      if (v[i * c + j] > v[i * c + best]) best = static_cast<int>(j);
    out[i] = best;
  }
  return out;
}

}  // namespace ftcc::data
