// nn/loss.hpp: the losses as modules of the usual shape (PyTorch's nn.MSELoss, nn.CrossEntropyLoss).
//   MSELoss           mean over all elements of (prediction - target)^2 (regression)
//   CrossEntropyLoss  logits [N, C] against class probabilities [N, C] (one-hot rows from
//                     data::one_hot, or soft labels): mean over rows of -sum_j t_j log_softmax(x)_j,
//                     fused and stable (tensor::cross_entropy_loss). The model's last layer gives
//                     the logits: no softmax or sigmoid in front of it.
// Both throw ftcc::InvalidArgument on shapes that do not fit (tensor/ops.hpp).
#pragma once

#include "ftcc/tensor/ops.hpp"

namespace ftcc::nn {

struct MSELoss {
  tensor::Tensor operator()(const tensor::Tensor& prediction, const tensor::Tensor& target) const {
    return tensor::mse_loss(prediction, target);
  }
};

struct CrossEntropyLoss {
  tensor::Tensor operator()(const tensor::Tensor& logits, const tensor::Tensor& target) const {
    return tensor::cross_entropy_loss(logits, target);
  }
};

}  // namespace ftcc::nn
