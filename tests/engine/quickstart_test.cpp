// The quick start of docs/engine.md, compiled and run as a test so that the documented code keeps
// working: build an MLP, train it with AdamW on digits, save model + optimizer as safetensors,
// load them into a fresh model and optimizer, and get the same predictions and the same next step.
#include <gtest/gtest.h>

#include <filesystem>

#include "ftcc/data/datasets.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/checkpoint.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"

namespace ftcc {
namespace {

TEST(QuickStart, TrainSaveLoadDigits) {
  // --8<-- [start:quickstart]
  using namespace ftcc;
  data::Dataset digits = data::load_digits();                       // 1797 x 64, one-hot targets
  auto [train, test] = data::train_test_split(digits, 0.2, /*seed=*/1);
  auto scaler = data::Standardizer::fit(train.features);
  train.features = scaler.apply(train.features);
  test.features = scaler.apply(test.features);

  auto model = nn::mlp({64, 64, 10}, nn::Activation::ReLU, /*seed=*/42);  // same bits on every rank
  optim::Adam opt(model->named_parameters(), optim::adamw_options(/*lr=*/3e-3));
  data::DistributedSampler sampler({.num_samples = train.size(), .global_batch = 64, .seed = 7});

  for (data::Cursor c; c.epoch < 5; c = sampler.next(c)) {
    data::Batch b = train.gather(sampler.rank_ids(c, /*world=*/1, /*rank=*/0));
    opt.zero_grad();
    tensor::mse_loss((*model)(b.x), b.y).backward();
    opt.step();
  }
  optim::save_checkpoint("digits.safetensors", *model, &opt, {{"epochs", "5"}});
  // --8<-- [end:quickstart]

  auto model2 = nn::mlp({64, 64, 10}, nn::Activation::ReLU, /*seed=*/0);
  optim::Adam opt2(model2->named_parameters(), optim::adamw_options(3e-3));
  EXPECT_EQ(optim::load_checkpoint("digits.safetensors", *model2, &opt2).at("epochs"), "5");
  std::filesystem::remove("digits.safetensors");
  {
    tensor::NoGradGuard ng;
    EXPECT_EQ((*model2)(test.features).to_vector(), (*model)(test.features).to_vector());
    std::vector<int> pred = data::argmax_rows((*model)(test.features));
    int correct = 0;
    for (std::size_t i = 0; i < pred.size(); ++i) correct += pred[i] == test.labels[i];
    EXPECT_GT(correct, static_cast<int>(0.9 * static_cast<double>(pred.size())));  // 5 epochs: well past chance
  }
  // The restored optimizer continues exactly where the saved one would have.
  data::Batch b = train.gather(sampler.batch({5, 0}));
  for (auto* pair : {&opt, &opt2}) {
    auto& m = pair == &opt ? *model : *model2;
    pair->zero_grad();
    tensor::mse_loss(m(b.x), b.y).backward();
    pair->step();
  }
  EXPECT_EQ(nn::pack_bytes(model2->named_parameters()), nn::pack_bytes(model->named_parameters()));
}

}  // namespace
}  // namespace ftcc
