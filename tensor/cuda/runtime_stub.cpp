// CPU-only builds: every CUDA entry point refuses with an error that says why.
#include "ftcc/base/error.hpp"
#include "ftcc/tensor/cuda/runtime.hpp"

namespace ftcc::tensor::cuda {

namespace {
[[noreturn]] void no_cuda() { throw ftcc::Error("ftcc was built without CUDA (meson -Dcuda=enabled needs nvcc)"); }
}  // namespace

void* device_alloc(std::size_t) { no_cuda(); }
void device_free(void*) noexcept {}
void copy(void*, bool, const void*, bool, std::size_t) { no_cuda(); }
void synchronize() {}
int device_count() noexcept { return 0; }

}  // namespace ftcc::tensor::cuda
