// train/pinned_buffers.hpp: byte buffers of the model-parallel trainers' point-to-point traffic,
// kept alive across interrupted operations.
//
// After a fault, a send or receive that comm abandoned may still be read or written by MPI during
// the recovery, so the memory of an interrupted step is never freed (a bounded leak per failure);
// the buffers of a completed step are released.
//
// These buffers are host memory: MPI here is not CUDA-aware. A scheme running on a GPU stages
// what it sends or reduces with on_host() and moves what it received back with on_device().
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/tensor/tensor.hpp"

namespace ftcc::train {

using Bytes = std::vector<std::byte>;

class Pins {
 public:
  template <class T>
  std::shared_ptr<T> keep(std::shared_ptr<T> p) {
    live_.push_back(p);
    return p;
  }
  const tensor::Tensor& keep(const tensor::Tensor& t) {
    tensors_.push_back(t);
    return t;
  }
  // Lets go of one pin of t's storage: its operation completed while the step goes on (a
  // pipeline stage frees each micro-batch's buffers as soon as it can, or 1F1B would hold as much
  // as GPipe). A no-op when t is not pinned.
  void release(const tensor::Tensor& t) {
    const auto it = std::find_if(tensors_.begin(), tensors_.end(), [&](const tensor::Tensor& x) { return x.data() == t.data(); });
    if (it != tensors_.end()) tensors_.erase(it);
  }
  // A new pinned buffer of n bytes.
  Bytes& bytes(std::size_t n) { return *keep(std::make_shared<Bytes>(n)); }
  void completed() {
    live_.clear();
    tensors_.clear();
  }
  void abandoned() {
    for (auto& p : live_) dead_.push_back(std::move(p));
    for (auto& t : tensors_) dead_.push_back(std::make_shared<tensor::Tensor>(std::move(t)));
    live_.clear();
    tensors_.clear();
  }

 private:
  std::vector<std::shared_ptr<const void>> live_, dead_;
  std::vector<tensor::Tensor> tensors_;
};

// t itself when it is in host memory, else a host copy (a new tensor without a graph).
inline tensor::Tensor on_host(const tensor::Tensor& t) {
  return t.device() == tensor::Device::CPU ? t : t.to(tensor::Device::CPU);
}
// t itself when it is on device d, else a copy there (a new tensor without a graph).
inline tensor::Tensor on_device(const tensor::Tensor& t, tensor::Device d) { return t.device() == d ? t : t.to(d); }

// Packed state bytes, or a piece of them (a multiple of 4), as int32 words. Throws ftcc::Error otherwise.
void send_bytes(comm::Communicator& c, std::span<const std::byte> b, int peer, int tag);
void recv_bytes(comm::Communicator& c, std::span<std::byte> b, int peer, int tag);
comm::P2PRequest isend_bytes(comm::Communicator& c, std::span<const std::byte> b, int peer, int tag);
comm::P2PRequest irecv_bytes(comm::Communicator& c, std::span<std::byte> b, int peer, int tag);

}  // namespace ftcc::train
