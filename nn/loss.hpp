// nn/loss.hpp: MSELoss, mean over all elements of (prediction - target)^2. Classification in
// ftcc is MSE against one-hot targets (data::one_hot), so this is the only loss.
#pragma once

#include "ftcc/tensor/ops.hpp"

namespace ftcc::nn {

struct MSELoss {
  tensor::Tensor operator()(const tensor::Tensor& prediction, const tensor::Tensor& target) const {
    return tensor::mse_loss(prediction, target);
  }
};

}  // namespace ftcc::nn
