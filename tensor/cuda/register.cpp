// tensor/cuda/register.cpp: linked whole into in-tree executables that link the CUDA code (meson's
// ftcc_cuda_dep: tools/ftcc-train, tests, benchmarks). Registers that code before main, so they use
// CUDA without searching for libftcc_cuda.so and without environment variables.
#include "ftcc/tensor/cuda/backend.hpp"

namespace {
[[maybe_unused]] const bool registered = [] {
  ftcc::tensor::cuda::register_backend(*ftcc_cuda_backend());
  return true;
}();
}  // namespace
