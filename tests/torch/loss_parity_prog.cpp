// tests/torch/loss_parity_prog.cpp: one loss of ftcc's, forward and backward, over inputs a test
// gives in a file, for tests/torch/loss_parity.py to compare with PyTorch's.
//   loss_parity_prog cross-entropy|mse cpu|cuda IN OUT
// IN:  int64 rows, int64 cols, then rows x cols float32 predictions (logits), then as many targets.
// OUT: float32 loss, then rows x cols float32 gradient of the loss with respect to the predictions.
// Exits 0, 77 for cuda without a device (the test then skips that device), 2 on bad arguments.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/tensor.hpp"

using namespace ftcc::tensor;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: loss_parity_prog cross-entropy|mse cpu|cuda IN OUT\n";
    return 2;
  }
  const std::string loss = argv[1], device = argv[2];
  if ((loss != "cross-entropy" && loss != "mse") || (device != "cpu" && device != "cuda")) {
    std::cerr << "loss_parity_prog: unknown loss '" << loss << "' or device '" << device << "'\n";
    return 2;
  }
  if (device == "cuda" && !cuda_available()) return 77;
  std::ifstream in(argv[3], std::ios::binary);
  std::int64_t dims[2] = {0, 0};
  in.read(reinterpret_cast<char*>(dims), sizeof dims);
  const auto n = static_cast<std::size_t>(dims[0] * dims[1]);
  std::vector<float> x(n), t(n);
  in.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(n * sizeof(float)));
  in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (!in) {
    std::cerr << "loss_parity_prog: " << argv[3] << " is shorter than its header says\n";
    return 2;
  }
  const Device dev = device == "cuda" ? Device::CUDA : Device::CPU;
  Tensor logits = Tensor::from_vector({dims[0], dims[1]}, std::span<const float>(x)).to(dev);
  Tensor target = Tensor::from_vector({dims[0], dims[1]}, std::span<const float>(t)).to(dev);
  logits.requires_grad_(true);
  Tensor l = loss == "mse" ? mse_loss(logits, target) : cross_entropy_loss(logits, target);
  l.backward();
  const float value = static_cast<float>(l.item());
  const std::vector<float> grad = logits.grad().to(Device::CPU).to_vector();
  std::ofstream out(argv[4], std::ios::binary);
  out.write(reinterpret_cast<const char*>(&value), sizeof value);
  out.write(reinterpret_cast<const char*>(grad.data()), static_cast<std::streamsize>(grad.size() * sizeof(float)));
  return out ? 0 : 1;
}
