// End-to-end training on the shipped data sets (CPU).
//  * diabetes, Linear(10, 1) + MSE + SGD with momentum: the training MSE reaches within 1% of the
//    least-squares optimum, computed here in closed form (normal equations in float64 on the same
//    standardized data, with an intercept column).
//  * digits, MLP 64-64-10 with ReLU, MSE on one-hot targets, Adam: at least 95% accuracy on a
//    held-out 20% split that the model never trained on.
// Both use the DistributedSampler (as a 1-rank world) for batch order, as the trainer will.
#include <gtest/gtest.h>

#include <Eigen/Dense>

#include "ftcc/data/datasets.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/nn/linear.hpp"
#include "ftcc/nn/loss.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/tensor/autograd.hpp"

namespace ftcc {
namespace {

using tensor::Tensor;

double least_squares_mse(const Tensor& x, const Tensor& y) {
  const std::int64_t n = x.size(0), f = x.size(1);
  std::vector<double> xv = x.to_vector_f64(), yv = y.to_vector_f64();
  Eigen::MatrixXd a(n, f + 1);
  Eigen::VectorXd b(n);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < f; ++j) a(i, j) = xv[i * f + j];
    a(i, f) = 1.0;
    b(i) = yv[i];
  }
  Eigen::VectorXd w = (a.transpose() * a).ldlt().solve(a.transpose() * b);
  return (a * w - b).squaredNorm() / static_cast<double>(n);
}

TEST(Training, DiabetesLinearSgdReachesTheLeastSquaresOptimum) {
  data::Dataset d = data::load_diabetes();
  d.features = data::Standardizer::fit(d.features).apply(d.features);
  // Standardized target too, so that one learning rate suits it; the comparison is on this scale.
  d.targets = data::Standardizer::fit(d.targets).apply(d.targets);
  const double optimum = least_squares_mse(d.features, d.targets);
  ASSERT_GT(optimum, 0.3);  // diabetes is noisy: R^2 ~ 0.5, so the optimum is far from 0

  nn::Linear model(10, 1, {.seed = 1});
  optim::SGD opt(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DistributedSampler sampler({.num_samples = d.size(), .global_batch = 32, .seed = 2});
  nn::MSELoss mse;
  data::Cursor c;
  for (int epoch = 0; epoch < 150; ++epoch) {
    // Step decay: mini-batch noise has to die out to get within 1% of the optimum.
    opt.set_lr(epoch < 50 ? 0.05 : epoch < 100 ? 0.01 : 0.002);
    for (std::int64_t k = 0; k < sampler.steps_per_epoch(); ++k, c = sampler.next(c)) {
      auto ids = sampler.rank_ids(c, 1, 0);
      data::Batch b = d.gather(ids);
      opt.zero_grad();
      mse(model(b.x), b.y).backward();
      opt.step();
    }
  }
  tensor::NoGradGuard ng;
  double final_mse = mse(model(d.features), d.targets).item();
  RecordProperty("final_mse", std::to_string(final_mse));
  RecordProperty("least_squares_mse", std::to_string(optimum));
  EXPECT_LE(final_mse, optimum * 1.01) << "optimum " << optimum;
  EXPECT_GE(final_mse, optimum * (1 - 1e-5));  // nothing beats least squares (float32 slack)
}

TEST(Training, DigitsMlpReaches95PercentHeldOut) {
  data::Dataset all = data::load_digits();
  auto [train, test] = data::train_test_split(all, 0.2, 7);
  data::Standardizer s = data::Standardizer::fit(train.features);
  train.features = s.apply(train.features);
  test.features = s.apply(test.features);

  auto model = nn::mlp({64, 64, 10}, nn::Activation::ReLU, 3);
  optim::Adam opt(model->named_parameters(), {.lr = 3e-3});
  data::DistributedSampler sampler({.num_samples = train.size(), .global_batch = 32, .seed = 4, .micro_batch = 8});
  data::Cursor c;
  for (int epoch = 0; epoch < 25; ++epoch) {
    for (std::int64_t k = 0; k < sampler.steps_per_epoch(); ++k, c = sampler.next(c)) {
      data::Batch b = train.gather(sampler.batch(c));
      opt.zero_grad();
      // Micro-batches of 8 rows as views; their gradients add up to the batch gradient.
      const double denom = static_cast<double>(b.x.size(0) * 10);
      for (std::int64_t r = 0; r < b.x.size(0); r += 8) {
        std::int64_t e = std::min(b.x.size(0), r + 8);
        tensor::mse_loss((*model)(b.x.rows(r, e)), b.y.rows(r, e), denom).backward();
      }
      opt.step();
    }
  }
  tensor::NoGradGuard ng;
  std::vector<int> pred = data::argmax_rows((*model)(test.features));
  int correct = 0;
  for (std::size_t i = 0; i < pred.size(); ++i) correct += pred[i] == test.labels[i];
  double acc = static_cast<double>(correct) / static_cast<double>(pred.size());
  EXPECT_GE(acc, 0.95) << correct << " of " << pred.size();
  RecordProperty("held_out_accuracy", std::to_string(acc));
}

}  // namespace
}  // namespace ftcc
