// How libftcc reaches its CUDA code (tensor/cuda/backend.hpp), in the three situations a program
// can be in. One source, run by meson three ways (FTCC_TEST_BACKEND says which):
//   none        the program does not link the CUDA code and libftcc_cuda.so is nowhere on the
//               search path (or the build has no CUDA): device count 0, never a throw; every CUDA
//               tensor request throws ftcc::Error that names what is missing and what to do.
//   dlopen      not linked either, but LD_LIBRARY_PATH leads to the built libftcc_cuda.so: found by
//               the dlopen search, reported by its path.
//   registered  linked with the CUDA code (meson's ftcc_cuda_dep), which registers itself before
//               main: no search at all.
// Without a GPU the last two still have a backend; the device count is then 0 and an allocation
// fails with CUDA's own error, as ftcc::Error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/cuda/backend.hpp"
#include "ftcc/tensor/storage.hpp"
#include "ftcc/tensor/tensor.hpp"
#include "ftcc_config.hpp"

namespace ftcc::tensor {
namespace {

std::string mode() {
  const char* m = std::getenv("FTCC_TEST_BACKEND");
  return m != nullptr ? m : "none";
}

// The message of the ftcc::Error that f throws ("" and a test failure when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ftcc::Error was thrown";
  return "";
}

TEST(CudaBackend, WithoutABackendDeviceCountIsZeroAndCudaTensorsSayWhatIsMissing) {
  if (mode() != "none") GTEST_SKIP() << "mode " << mode();
  if (cuda::find_backend() != nullptr)
    GTEST_SKIP() << "a libftcc_cuda.so was found on this machine's search path: " << cuda::backend_origin();
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_FALSE(cuda_available());

  const std::string alloc = error_of([] { (void)Tensor::zeros({4, 3}, DType::f32, Device::CUDA); });
  const std::string to = error_of([] { (void)Tensor::zeros({2}).to(Device::CUDA); });
  const std::string direct = error_of([] { (void)cuda::backend(); });
  // Every path gives the same text, which is also what backend_origin() reports.
  EXPECT_EQ(alloc, direct);
  EXPECT_EQ(to, direct);
  EXPECT_EQ(cuda::backend_origin(), direct);
  if (FTCC_HAVE_CUDA) {
    // What is missing, how to get it, and dlopen's own words.
    EXPECT_NE(direct.find("CUDA tensors need libftcc_cuda.so"), std::string::npos) << direct;
    EXPECT_NE(direct.find("-Dcuda=enabled"), std::string::npos) << direct;
    EXPECT_NE(direct.find("dlopen(\"libftcc_cuda.so\") said: "), std::string::npos) << direct;
    EXPECT_NE(direct.find("cannot open shared object file"), std::string::npos) << direct;
  } else {
    EXPECT_NE(direct.find("built without"), std::string::npos) << direct;
    EXPECT_NE(direct.find("-Dcuda=enabled"), std::string::npos) << direct;
  }
  // Asking again neither throws from the count nor changes the answer (the search is done once).
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_EQ(cuda::backend_origin(), direct);
}

TEST(CudaBackend, FoundBackendIsTheBuildsOwnAndReportsItsOrigin) {
  if (mode() == "none") GTEST_SKIP() << "mode none";
  ASSERT_TRUE(FTCC_HAVE_CUDA) << "modes dlopen and registered only run in builds with CUDA";
  const cuda::Backend* b = cuda::find_backend();
  ASSERT_NE(b, nullptr) << cuda::backend_origin();
  EXPECT_EQ(b->abi, cuda::kBackendAbi);
  EXPECT_STREQ(b->version, FTCC_VERSION);
  EXPECT_EQ(&cuda::backend(), b);
  const std::string origin = cuda::backend_origin();
  if (mode() == "registered") {
    EXPECT_EQ(origin, "registered by the program");
  } else {
    const std::string tail = "/libftcc_cuda.so";
    ASSERT_GE(origin.size(), tail.size()) << origin;
    EXPECT_EQ(origin.substr(origin.size() - tail.size()), tail) << origin;
  }
}

TEST(CudaBackend, WithABackendButNoGpuAllocationFailsWithCudasError) {
  if (mode() == "none") GTEST_SKIP() << "mode none";
  if (cuda_device_count() > 0) {
    // A GPU: the round trip works through the backend.
    Tensor t = Tensor::full({3}, 2.5).to(Device::CUDA);
    EXPECT_EQ(t.to(Device::CPU).to_vector(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
    return;
  }
  EXPECT_FALSE(cuda_available());
  const std::string e = error_of([] { (void)Tensor::zeros({4}, DType::f32, Device::CUDA); });
  EXPECT_NE(e.find("runtime.cu:"), std::string::npos) << e;
  EXPECT_NE(e.find("cudaMalloc"), std::string::npos) << e;
}

TEST(CudaBackend, RegisteringATableOfAnotherAbiIsRefusedAndChangesNothing) {
  const cuda::Backend* before = cuda::find_backend();
  static cuda::Backend other{};  // all entry points null: never called
  other.abi = cuda::kBackendAbi + 1;
  const std::string e = error_of([] { cuda::register_backend(other); });
  EXPECT_NE(e.find("ABI"), std::string::npos) << e;
  EXPECT_EQ(cuda::find_backend(), before);
}

}  // namespace
}  // namespace ftcc::tensor
