// ftcc.hpp: the whole embedding API in one include, installed as <ftcc/ftcc.hpp>.
//
//   #include <ftcc/ftcc.hpp>      // or the single headers below, <ftcc/LAYER/NAME.hpp>
//
// Layers, each usable alone (the dependencies point one way):
//   tensor, nn, optim, data   the training engine: tensors with autograd, modules, optimizers,
//                             checkpoints, datasets and the exactly-once sampler (docs/engine.md)
//   comm                      collectives on MPI point-to-point, raw buffers (docs/collectives.md)
//   recovery                  a group that survives the loss of ranks, and run_job, the entry point
//                             with an honest exit status (docs/recovery.md)
// The trainers behind ftcc-train (train/) are not part of this header; include them by name.
// Requires C++20 or newer; build with your MPI's compiler wrapper (mpicxx).
#pragma once

#include "ftcc/base/error.hpp"

#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/dtype.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/random.hpp"
#include "ftcc/tensor/tensor.hpp"

#include "ftcc/nn/activation.hpp"
#include "ftcc/nn/linear.hpp"
#include "ftcc/nn/loss.hpp"
#include "ftcc/nn/module.hpp"
#include "ftcc/nn/safetensors.hpp"
#include "ftcc/nn/sequential.hpp"

#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/checkpoint.hpp"
#include "ftcc/optim/optimizer.hpp"
#include "ftcc/optim/sgd.hpp"

#include "ftcc/data/dataset.hpp"
#include "ftcc/data/datasets.hpp"
#include "ftcc/data/sampler.hpp"

#include "ftcc/comm/allreduce_async.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/types.hpp"
#include "ftcc/comm/ulfm.hpp"

#include "ftcc/recovery/fault_spec.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/recovery/run_job.hpp"
#include "ftcc/recovery/step_loop.hpp"
