// tensor/host_buffers: freed CPU buffers are reused by size, and a training loop of fixed shapes
// makes no system allocation after its first step (counted by the allocator, not assumed).
#include <gtest/gtest.h>

#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/tensor/host_buffers.hpp"
#include "ftcc/tensor/ops.hpp"
#include "test_util.hpp"

namespace ftcc {
namespace {

using tensor::Tensor;

TEST(HostBuffers, AFreedBufferIsReusedForTheSameSize) {
  const auto before = tensor::host_buffer_stats();
  if (!before.caching) GTEST_SKIP() << "caching is off (AddressSanitizer build or FTCC_NO_HOST_CACHE=1)";
  void* a = tensor::host_buffer_alloc(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
  tensor::host_buffer_free(a, 1000);
  void* b = tensor::host_buffer_alloc(1000);  // the same rounded size: the same buffer
  EXPECT_EQ(a, b);
  tensor::host_buffer_free(b, 1000);
  void* c = tensor::host_buffer_alloc(5000);  // another size: not the free 1000-byte buffer
  EXPECT_NE(c, b);
  const auto after = tensor::host_buffer_stats();
  EXPECT_EQ(after.reused - before.reused, 1u);
  EXPECT_GE(after.system_allocs - before.system_allocs, 2u);  // a, then c
  tensor::host_buffer_free(c, 5000);
  EXPECT_GE(tensor::host_buffer_stats().cached_bytes, 1024u + 5056u);
  tensor::host_buffers_release();
  EXPECT_EQ(tensor::host_buffer_stats().cached_bytes, 0u);
}

TEST(HostBuffers, ATrainingStepOfFixedShapesAllocatesNothingAfterTheFirst) {
  if (!tensor::host_buffer_stats().caching) GTEST_SKIP() << "caching is off";
  auto model = nn::mlp({64, 128, 128, 10}, nn::Activation::ReLU, 1);
  optim::SGD opt(model->named_parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = test::random_tensor({32, 64}, 2, -1, 1, tensor::DType::f32);
  const Tensor y = test::random_tensor({32, 10}, 3, -1, 1, tensor::DType::f32);
  auto step = [&] {
    opt.zero_grad();
    auto loss = tensor::mse_loss((*model)(x), y);
    loss.backward();
    opt.step();
    return loss.item();
  };
  step();
  const auto after_first = tensor::host_buffer_stats();
  for (int i = 0; i < 5; ++i) step();
  const auto after_more = tensor::host_buffer_stats();
  EXPECT_EQ(after_more.system_allocs, after_first.system_allocs) << "steps 2-6 took buffers from the system";
  EXPECT_GT(after_more.reused, after_first.reused) << "no buffer was reused: the loop allocated nothing at all?";
}

}  // namespace
}  // namespace ftcc
