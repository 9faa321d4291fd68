// train/pp_stage.hpp: one pipeline stage: the contiguous layers [first, last) of an MLP, their
// optimizer, and each layer's complete training state as a list of named tensors.
//
// Layer i (train/partition.hpp) is Linear(widths[i], widths[i+1]) plus the activation after it
// (none after the last layer). Its parameters carry the names nn::mlp gives them ("<2i>.weight",
// "<2i>.bias") and are initialised exactly as nn::mlp does (mix_seed(seed, 2i)), so the stages of
// a pipeline together are bit-for-bit the single-process model, and a stage's optimizer state has
// the same names as the full model's (checkpoints stay in the data-parallel format).
//
// layer_state(params, opt_state, i) works on any such pair of lists (a stage's, or a full model's
// on the rank that reads or writes a checkpoint): the layer's weight, bias, their optimizer
// tensors and the optimizer's "step", as live handles, so pack_bytes/unpack_bytes move a layer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ftcc/nn/linear.hpp"
#include "ftcc/nn/named_tensors.hpp"
#include "ftcc/optim/optimizer.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

// The named tensors of layer i in (params, opt_state); throws when one is missing.
nn::NamedTensors layer_state(const nn::NamedTensors& params, const nn::NamedTensors& opt_state, int layer);

class PipelineStage {
 public:
  PipelineStage(const TrainConfig& cfg, const std::vector<std::int64_t>& widths, int first, int last);

  int first() const { return first_; }
  int last() const { return last_; }
  bool holds(int layer) const { return layer >= first_ && layer < last_; }
  std::int64_t in_width() const { return widths_[static_cast<std::size_t>(first_)]; }
  std::int64_t out_width() const { return widths_[static_cast<std::size_t>(last_)]; }

  // The stage's layers applied to x (recorded for autograd when x or the weights need it).
  tensor::Tensor forward(const tensor::Tensor& x) const;
  const nn::NamedTensors& params() const { return params_; }
  optim::Optimizer& optimizer() { return *opt_; }
  nn::NamedTensors layer_state(int layer) const;
  std::vector<std::byte> pack_layer(int layer) const;
  void unpack_layer(int layer, std::span<const std::byte> bytes);
  std::size_t layer_bytes(int layer) const;
  // Parameter and optimizer bytes held by this stage.
  std::size_t state_bytes() const;

 private:
  std::vector<std::int64_t> widths_;
  int first_, last_;
  Activation activation_;
  std::vector<std::shared_ptr<nn::Linear>> linears_;
  nn::NamedTensors params_;
  std::unique_ptr<optim::Optimizer> opt_;
};

}  // namespace ftcc::train
