// tensor/cuda/entry.cpp: the one entry point of libftcc_cuda.so, the table through which libftcc
// reaches the CUDA code (tensor/cuda/backend.hpp). Plain C++: it only takes addresses.
#include "ftcc/tensor/cuda/backend.hpp"
#include "ftcc_config.hpp"

namespace ftcc::tensor::cuda {
namespace {

template <class T>
constexpr KernelTable<T> kernel_table() {
  return {
      .gemm = &gemm<T>,
      .binary = &binary<T>,
      .add_rowvec = &add_rowvec<T>,
      .colsum = &colsum<T>,
      .axpy = &axpy<T>,
      .scale_copy = &scale_copy<T>,
      .fill = &fill<T>,
      .fill_from_scalar = &fill_from_scalar<T>,
      .unary_forward = &unary_forward<T>,
      .unary_backward = &unary_backward<T>,
      .sum_all = &sum_all<T>,
      .mse_forward = &mse_forward<T>,
      .mse_backward = &mse_backward<T>,
      .cross_entropy_forward = &cross_entropy_forward<T>,
      .cross_entropy_backward = &cross_entropy_backward<T>,
  };
}

constexpr Backend kTable{
    .abi = kBackendAbi,
    .version = FTCC_VERSION,
    .device_alloc = &device_alloc,
    .device_free = &device_free,
    .copy = &copy,
    .synchronize = &synchronize,
    .device_count = &device_count,
    .set_device = &set_device,
    .f32 = kernel_table<float>(),
    .f64 = kernel_table<double>(),
    .sgd_step = &sgd_step,
    .adam_step = &adam_step,
};

}  // namespace
}  // namespace ftcc::tensor::cuda

extern "C" const ftcc::tensor::cuda::Backend* ftcc_cuda_backend() noexcept { return &ftcc::tensor::cuda::kTable; }
