// tensor/cuda/backend.hpp: how the CPU side of ftcc reaches its CUDA code, which lives in a
// library of its own (libftcc_cuda.so) so that libftcc itself links no CUDA library.
//
// The CUDA library exports one C entry point, ftcc_cuda_backend(), returning a Backend: a table of
// the entry points of runtime.hpp and kernels.hpp (their own declarations give the types, so the
// table cannot drift from the kernels). libftcc calls the CUDA code only through backend()
// (storage.cpp, kernels.cpp, fused_update.cpp). To add a kernel: declare it in kernels.hpp, add a
// member here, fill it in entry.cpp, and bump kBackendAbi.
//
// Where the backend comes from, looked up the first time a CUDA device is asked for:
//   1. the one registered by the program (register_backend). In-tree executables that link the
//      CUDA code register it from a static initializer (register.cpp, meson's ftcc_cuda_dep);
//   2. libftcc_cuda.so in the folder of the file that holds libftcc's code (dladdr), i.e. next to
//      an installed libftcc.so;
//   3. libftcc_cuda.so by the ordinary dlopen search (RUNPATH, LD_LIBRARY_PATH, ld.so cache).
// The result of 2-3 is kept for the life of the process (a missing library is not searched for on
// every call; a later register_backend still wins). A build without CUDA (-Dcuda=disabled) searches
// nothing and has no backend: device counts are 0 and every CUDA tensor operation throws.
#pragma once

#include <string>
#include <type_traits>

#include "ftcc/tensor/cuda/kernels.hpp"
#include "ftcc/tensor/cuda/runtime.hpp"

namespace ftcc::tensor::cuda {

// Version of the Backend layout. A table whose abi differs is refused (an old libftcc_cuda.so
// left next to a new libftcc, or the reverse).
inline constexpr int kBackendAbi = 3;

// The kernels of kernels.hpp for one element type.
template <class T>
struct KernelTable {
  decltype(&cuda::gemm<T>) gemm;
  decltype(&cuda::binary<T>) binary;
  decltype(&cuda::add_rowvec<T>) add_rowvec;
  decltype(&cuda::colsum<T>) colsum;
  decltype(&cuda::axpy<T>) axpy;
  decltype(&cuda::scale_copy<T>) scale_copy;
  decltype(&cuda::fill<T>) fill;
  decltype(&cuda::fill_from_scalar<T>) fill_from_scalar;
  decltype(&cuda::unary_forward<T>) unary_forward;
  decltype(&cuda::unary_backward<T>) unary_backward;
  decltype(&cuda::sum_all<T>) sum_all;
  decltype(&cuda::mse_forward<T>) mse_forward;
  decltype(&cuda::mse_backward<T>) mse_backward;
  decltype(&cuda::cross_entropy_forward<T>) cross_entropy_forward;
  decltype(&cuda::cross_entropy_backward<T>) cross_entropy_backward;
};

// Every member is non-null in a table that ftcc_cuda_backend() returns. The functions keep the
// contracts of runtime.hpp and kernels.hpp: they throw ftcc::Error with file:line on a CUDA
// failure (device_free and device_count never throw).
struct Backend {
  int abi;              // kBackendAbi of the library that filled the table; read before anything else
  const char* version;  // FTCC_VERSION of that library

  decltype(&cuda::device_alloc) device_alloc;
  decltype(&cuda::device_free) device_free;
  decltype(&cuda::copy) copy;
  decltype(&cuda::synchronize) synchronize;
  decltype(&cuda::device_count) device_count;
  decltype(&cuda::set_device) set_device;

  KernelTable<float> f32;
  KernelTable<double> f64;

  decltype(&cuda::sgd_step) sgd_step;
  decltype(&cuda::adam_step) adam_step;

  template <class T>
  const KernelTable<T>& kernels() const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "CUDA kernels are float or double");
    if constexpr (std::is_same_v<T, float>) return f32;
    else return f64;
  }
};

// Makes b the backend of this process, ahead of any search. b must outlive every CUDA tensor (a
// static table does). Pre: b.abi == kBackendAbi, else throws ftcc::Error and changes nothing.
// Thread-safe; callable before main (static initializers). Registering again replaces the table.
void register_backend(const Backend& b);

// The backend (registered, else found as above), or nullptr. Never throws.
const Backend* find_backend() noexcept;

// The backend, or ftcc::Error saying what is missing and what to do (build with -Dcuda=enabled;
// install libftcc_cuda.so next to libftcc; what dlopen said). Every CUDA tensor operation calls it.
const Backend& backend();

// Where the backend came from ("registered by the program", or the path of libftcc_cuda.so), or
// why there is none (the text of backend()'s error). For diagnostics and tests; never throws
// anything but std::bad_alloc.
std::string backend_origin();

}  // namespace ftcc::tensor::cuda

// Defined only in libftcc_cuda.so (tensor/cuda/entry.cpp): the table of its CUDA code, with
// abi == kBackendAbi of the headers it was built with. Never throws; never null.
extern "C" const ftcc::tensor::cuda::Backend* ftcc_cuda_backend() noexcept;
