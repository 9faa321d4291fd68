// Built by tests/embed/embed_test.sh against the installed ftcc with pkg-config alone, once with
// libftcc.so and once with libftcc.a: a CPU-only program that asks for CUDA. It links no CUDA
// library; libftcc finds libftcc_cuda.so on its own (tensor/cuda/backend.hpp) or says why not.
// Prints three lines for the script to check: where the backend came from (or why there is none),
// the device count, and what a CUDA tensor request gave.
#include <cstdio>
#include <exception>

#include <ftcc/base/error.hpp>
#include <ftcc/tensor/cuda/backend.hpp>
#include <ftcc/tensor/storage.hpp>
#include <ftcc/tensor/tensor.hpp>

int main() {
  using namespace ftcc::tensor;
  std::printf("origin: %s\n", cuda::backend_origin().c_str());
  std::printf("devices: %d\n", cuda_device_count());
  try {
    Tensor t = Tensor::full({3}, 1.5, DType::f32, Device::CUDA);
    std::printf("cuda tensor: ok %g\n", static_cast<double>(t.to(Device::CPU).to_vector()[2]));
  } catch (const ftcc::Error& e) {
    std::printf("cuda tensor: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::printf("cuda tensor: not an ftcc::Error: %s\n", e.what());
    return 1;
  }
  return 0;
}
