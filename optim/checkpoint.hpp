// optim/checkpoint.hpp: model + optimizer state in one safetensors file.
//
// Model parameters keep their own names ("0.weight", ...), so the file opens in PyTorch as a
// state dict of the equivalent torch.nn.Sequential; optimizer state is stored under
// "optimizer.<state name>" ("optimizer.step", "optimizer.0.weight.exp_avg", ...). Metadata
// records "format" = "ftcc-checkpoint-1" and "optimizer" = its type, plus the caller's entries.
// load_checkpoint validates the whole file (names, shapes, dtypes, optimizer type) before it
// changes anything, and throws nn::FormatError naming the tensor and the problem.
#pragma once

#include <string>

#include "ftcc/nn/module.hpp"
#include "ftcc/nn/safetensors.hpp"
#include "ftcc/optim/optimizer.hpp"

namespace ftcc::optim {

void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                     const nn::Metadata& extra = {});
// Returns the file's metadata. With optimizer == nullptr only the model is loaded (and optimizer
// entries in the file are ignored).
nn::Metadata load_checkpoint(const std::string& path, nn::Module& model, Optimizer* optimizer);

}  // namespace ftcc::optim
