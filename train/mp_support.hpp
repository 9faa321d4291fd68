// train/mp_support.hpp: pieces the model-parallel trainers (pp_trainer, tp_trainer) share:
// the start-up configuration check, buffers kept alive across interrupted point-to-point
// operations, packed-byte send/recv, and the summary's metrics on a full model.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/data/dataset.hpp"
#include "ftcc/nn/module.hpp"
#include "ftcc/tensor/tensor.hpp"
#include "ftcc/train/state_hash.hpp"
#include "ftcc/train/train_config.hpp"

namespace ftcc::train {

using Bytes = std::vector<std::byte>;

// Throws ftcc::InvalidArgument (same text on every rank) when the ranks were started with
// different configurations; returns the configuration's hash.
Digest check_same_config(const TrainConfig& cfg, comm::Communicator& comm, const std::vector<int>& members);

// Buffers of point-to-point operations: after a fault, a send or receive that comm abandoned may
// still be read or written by MPI during the recovery, so the memory of an interrupted step is
// never freed (a bounded leak per failure); the buffers of a completed step are released.
class Pins {
 public:
  template <class T>
  std::shared_ptr<T> keep(std::shared_ptr<T> p) {
    live_.push_back(p);
    return p;
  }
  const tensor::Tensor& keep(const tensor::Tensor& t) {
    live_.push_back(std::make_shared<tensor::Tensor>(t));
    return t;
  }
  void completed() { live_.clear(); }
  void abandoned() {
    for (auto& p : live_) dead_.push_back(std::move(p));
    live_.clear();
  }

 private:
  std::vector<std::shared_ptr<const void>> live_, dead_;
};

// Blocking send/recv of packed state bytes (a multiple of 4) as int32 words.
void send_bytes(comm::Communicator& c, const Bytes& b, int peer, int tag);
void recv_bytes(comm::Communicator& c, Bytes& b, int peer, int tag);

// MSE of model over all of d, and classification accuracy (argmax) over d; CPU.
double mse_on(nn::Module& model, const data::Dataset& d);
double accuracy_on(nn::Module& model, const data::Dataset& d);

// End-of-run figures of a model-parallel job, computed on rank 0 from the full model it gathered
// (`full` is only read there and may be null elsewhere) and broadcast to every rank: training MSE, held-out metric
// (accuracy for classification, else MSE), SHA-256 of the parameters. Collective.
struct FinalMetrics {
  double train_mse = 0, eval = 0;
  Digest digest{};
};
FinalMetrics final_metrics(comm::Communicator& c, nn::Module* full, const data::Dataset& train,
                           const data::Dataset& test, bool classification);

}  // namespace ftcc::train
