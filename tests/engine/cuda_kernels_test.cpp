// CPU vs CUDA agreement for every own kernel, on shapes that no tile divides, with guard bands
// around each device output buffer to catch out-of-bounds writes. Skips without a CUDA device.
//
// Tolerances (each far below the O(1) error of a wrong index or a missed tile):
//  * GEMM: a float32 dot product of length k with terms in [-1, 1] has a rounding error of at
//    most k * 2^-24 * sum|a_i b_i|; the CPU and GPU sum in different orders, and in practice the
//    error grows like sqrt(k) * 2^-24 * k, so 1e-5 + 1e-6 k absolute bounds both with margin.
//  * Single IEEE operations (add, sub, mul, bias broadcast): bitwise equal.
//  * Activations: Eigen's vectorised tanh/exp and CUDA's tanhf/expf are each within a few ulp of
//    the true value, so 2e-6 relative + 1e-6 absolute.
//  * Full reductions (sum, MSE): compared with a float64 host sum; the GPU's tree order has an
//    error of about log2(n) * 2^-24 relative to the sum of magnitudes, bounded here by 1e-6 of it.
//  * Fused optimizer updates: the same operations in the same order, except that nvcc contracts
//    a*b+c into FMAs (one rounding fewer): 1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ftcc/base/error.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/optim/sgd.hpp"
#include "ftcc/tensor/cuda/kernels.hpp"
#include "ftcc/tensor/cuda/runtime.hpp"
#include "ftcc/tensor/fused_update.hpp"
#include "ftcc/tensor/kernels_cpu.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/random.hpp"
#include "test_util.hpp"

namespace ftcc::tensor {
namespace {

constexpr std::size_t kGuard = 256;            // floats on each side
constexpr std::uint32_t kSentinel = 0x7fc0beefu;  // a NaN no kernel writes

// A device buffer of n floats with sentinel-filled guard bands on both sides.
class Guarded {
 public:
  explicit Guarded(const std::vector<float>& init) : n_(init.size()) {
    std::vector<float> host(n_ + 2 * kGuard);
    float s;
    std::memcpy(&s, &kSentinel, 4);
    std::fill(host.begin(), host.end(), s);
    std::copy(init.begin(), init.end(), host.begin() + kGuard);
    base_ = static_cast<float*>(cuda::device_alloc(host.size() * 4));
    cuda::copy(base_, true, host.data(), false, host.size() * 4);
  }
  ~Guarded() { cuda::device_free(base_); }
  Guarded(const Guarded&) = delete;
  float* ptr() const { return base_ + kGuard; }
  // The n values; fails the test if any guard word changed.
  std::vector<float> get() const {
    std::vector<float> host(n_ + 2 * kGuard);
    cuda::copy(host.data(), false, base_, true, host.size() * 4);
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (i >= kGuard && i < kGuard + n_) continue;
      std::uint32_t w;
      std::memcpy(&w, &host[i], 4);
      EXPECT_EQ(w, kSentinel) << "out-of-bounds write at guard word " << static_cast<long>(i) - static_cast<long>(kGuard);
    }
    return std::vector<float>(host.begin() + kGuard, host.begin() + kGuard + static_cast<long>(n_));
  }

 private:
  std::size_t n_;
  float* base_ = nullptr;
};

std::vector<float> rand_vec(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1) {
  std::vector<float> v(n);
  Philox(seed, 3).fill_uniform(v, lo, hi);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double abs_tol, double rel_tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 10; ++i) {
    double tol = abs_tol + rel_tol * std::abs(want[i]);
    if (!(std::abs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
      ++bad;
    }
  }
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)";
  }
};

TEST_F(CudaKernels, GemmAllTransposesBiasAndAccumulate) {
  struct Case { std::int64_t m, n, k; };
  // Primes and off-by-one sizes around both tile configurations, plus the large-tile path
  // (m * n >= 2^24) with a small k to keep the CPU reference cheap.
  std::vector<Case> cases{Case{1, 1, 1}, Case{17, 31, 13}, Case{64, 64, 16}, Case{65, 129, 33}, Case{300, 7, 200},
                          Case{4099, 4097, 3}};
  Philox shapes(2024);  // plus random shapes in [1, 300]^3, the same on every run
  for (std::uint64_t i = 0; i < 6; ++i)
    cases.push_back({1 + static_cast<std::int64_t>(shapes.bits(3 * i) % 300),
                     1 + static_cast<std::int64_t>(shapes.bits(3 * i + 1) % 300),
                     1 + static_cast<std::int64_t>(shapes.bits(3 * i + 2) % 300)});
  for (Case c : cases) {
    for (int variant = 0; variant < 8; ++variant) {
      bool ta = variant & 1, tb = variant & 2, acc = variant & 4;
      SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " ta=" << ta << " tb=" << tb << " acc=" << acc);
      auto a = rand_vec(static_cast<std::size_t>(c.m * c.k), 1), b = rand_vec(static_cast<std::size_t>(c.k * c.n), 2);
      auto bias = rand_vec(static_cast<std::size_t>(c.n), 3), c0 = rand_vec(static_cast<std::size_t>(c.m * c.n), 4);
      std::vector<float> want = c0;
      cpu::gemm<float>(ta, tb, c.m, c.n, c.k, a.data(), b.data(), want.data(), bias.data(), acc);
      Guarded da(a), db(b), dbias(bias), dc(c0);
      cuda::gemm<float>(ta, tb, c.m, c.n, c.k, da.ptr(), db.ptr(), dc.ptr(), dbias.ptr(), acc);
      expect_close(dc.get(), want, 1e-5 + 1e-6 * static_cast<double>(c.k), 1e-6, "own gemm");
      if (variant < 4 && c.m * c.n < (1 << 20)) {
        Guarded dr(c0);
        cuda::gemm_cublas<float>(ta, tb, c.m, c.n, c.k, da.ptr(), db.ptr(), dr.ptr(), false);
        std::vector<float> ref(static_cast<std::size_t>(c.m * c.n));
        cpu::gemm<float>(ta, tb, c.m, c.n, c.k, a.data(), b.data(), ref.data(), nullptr, false);
        expect_close(dr.get(), ref, 1e-5 + 1e-6 * static_cast<double>(c.k), 1e-6, "cublas gemm");
      }
    }
  }
}

TEST_F(CudaKernels, ElementwiseAndActivations) {
  for (std::int64_t n : {1, 255, 257, 100003}) {
    SCOPED_TRACE(n);
    auto a = rand_vec(static_cast<std::size_t>(n), 5, -4, 4), b = rand_vec(static_cast<std::size_t>(n), 6, -4, 4);
    for (int op = 0; op < 3; ++op) {
      std::vector<float> want(a.size());
      cpu::binary<float>(op, n, a.data(), b.data(), want.data());
      Guarded da(a), db(b), out{std::vector<float>(a.size())};
      cuda::binary<float>(op, n, da.ptr(), db.ptr(), out.ptr());
      expect_close(out.get(), want, 0, 0, "binary");  // one IEEE operation: bitwise equal
    }
    for (int op = 0; op < 3; ++op) {
      std::vector<float> y(a.size()), gx(a.size());
      cpu::unary_forward<float>(op, n, a.data(), y.data());
      cpu::unary_backward<float>(op, n, y.data(), b.data(), gx.data());
      Guarded da(a), db(b), dy{std::vector<float>(a.size())}, dgx{std::vector<float>(a.size())};
      cuda::unary_forward<float>(op, n, da.ptr(), dy.ptr());
      expect_close(dy.get(), y, 1e-6, 2e-6, "activation forward");
      Guarded yin(y);  // backward from the CPU's y so that only the backward kernel is compared
      cuda::unary_backward<float>(op, n, yin.ptr(), db.ptr(), dgx.ptr());
      expect_close(dgx.get(), gx, 1e-6, 2e-6, "activation backward");
    }
    {
      std::vector<float> want = b;
      cpu::axpy<float>(n, 0.3f, a.data(), want.data());
      Guarded da(a), dy(b);
      cuda::axpy<float>(n, 0.3f, da.ptr(), dy.ptr());
      expect_close(dy.get(), want, 1e-6, 1e-6, "axpy");  // CPU may fuse into an FMA
    }
  }
}

TEST_F(CudaKernels, RowBroadcastColumnSumsAndReductions) {
  struct Case { std::int64_t rows, cols; };
  for (Case c : {Case{1, 1}, Case{33, 1}, Case{7, 31}, Case{1000, 10}, Case{129, 257}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.cols);
    std::size_t n = static_cast<std::size_t>(c.rows * c.cols);
    auto x = rand_vec(n, 7), v = rand_vec(static_cast<std::size_t>(c.cols), 8);
    std::vector<float> want(n), cs(static_cast<std::size_t>(c.cols));
    cpu::add_rowvec<float>(c.rows, c.cols, x.data(), v.data(), want.data());
    cpu::colsum<float>(c.rows, c.cols, x.data(), cs.data(), false);
    Guarded dx(x), dv(v), out{std::vector<float>(n)}, dcs{std::vector<float>(cs.size())};
    cuda::add_rowvec<float>(c.rows, c.cols, dx.ptr(), dv.ptr(), out.ptr());
    cuda::colsum<float>(c.rows, c.cols, dx.ptr(), dcs.ptr(), false);
    expect_close(out.get(), want, 0, 0, "add_rowvec");
    expect_close(dcs.get(), cs, 1e-6 * static_cast<double>(c.rows), 1e-6, "colsum");
  }
  for (std::int64_t n : {1, 511, 512, 513, 1 << 20, 3000017}) {
    SCOPED_TRACE(n);
    auto p = rand_vec(static_cast<std::size_t>(n), 9), t = rand_vec(static_cast<std::size_t>(n), 10);
    double sum = 0, sum_abs = 0, sq = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      sum += p[i];
      sum_abs += std::abs(p[i]);
      sq += (double(p[i]) - t[i]) * (double(p[i]) - t[i]);
    }
    Guarded dp(p), dt(t), s{std::vector<float>(1)}, loss{std::vector<float>(1)}, g{std::vector<float>{0.7f}},
        gp{std::vector<float>(p.size())};
    cuda::sum_all<float>(n, dp.ptr(), s.ptr());
    expect_close(s.get(), {static_cast<float>(sum)}, 1e-6 * sum_abs + 1e-6, 0, "sum");
    cuda::mse_forward<float>(n, dp.ptr(), dt.ptr(), loss.ptr());
    expect_close(loss.get(), {static_cast<float>(sq / static_cast<double>(n))}, 1e-7, 1e-6, "mse forward");
    cuda::mse_backward<float>(n, dp.ptr(), dt.ptr(), g.ptr(), gp.ptr());
    std::vector<float> want(p.size());
    cpu::mse_backward<float>(n, p.data(), t.data(), 0.7f, want.data());
    expect_close(gp.get(), want, 1e-12, 1e-6, "mse backward");
  }
}

TEST_F(CudaKernels, CrossEntropyMatchesTheCpuReference) {
  // One warp per row: rows and classes below, at and above a warp's 32 lanes and a block's 8 rows,
  // logits up to +-30 (exp of the unshifted values would overflow nothing here, but the shift is
  // what makes the two agree to float rounding), soft targets.
  struct Case {
    std::int64_t rows, cols;
  };
  for (Case c : {Case{1, 1}, Case{7, 10}, Case{9, 31}, Case{33, 32}, Case{100, 33}, Case{1000, 1000}, Case{4099, 3}}) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.cols);
    const auto n = static_cast<std::size_t>(c.rows * c.cols);
    auto x = rand_vec(n, 16, -30, 30), t = rand_vec(n, 17, 0, 1);
    std::vector<float> lse(static_cast<std::size_t>(2 * c.rows)), want_g(n);
    const double sum = cpu::cross_entropy_forward<float>(c.rows, c.cols, x.data(), t.data(), lse.data());
    cpu::cross_entropy_backward<float>(c.rows, c.cols, x.data(), t.data(), lse.data(), 0.7f / static_cast<float>(c.rows),
                                       want_g.data());
    Guarded dx(x), dt(t), dlse{std::vector<float>(lse.size())}, loss{std::vector<float>(1)}, g{std::vector<float>{0.7f}},
        dg{std::vector<float>(n)};
    cuda::cross_entropy_forward<float>(c.rows, c.cols, dx.ptr(), dt.ptr(), 1.0f / static_cast<float>(c.rows),
                                       dlse.ptr(), loss.ptr());
    // Row losses are sums of cols terms of size up to 60 x cols: float rounding of the order of
    // cols x 2^-24 of that, relative.
    expect_close(loss.get(), {static_cast<float>(sum / static_cast<double>(c.rows))},
                 1e-6 * static_cast<double>(c.cols), 1e-5, "cross-entropy forward");
    expect_close(dlse.get(), lse, 1e-5, 1e-6, "cross-entropy row max and log-sum");
    cuda::cross_entropy_backward<float>(c.rows, c.cols, dx.ptr(), dt.ptr(), dlse.ptr(), g.ptr(),
                                        1.0f / static_cast<float>(c.rows), dg.ptr());
    expect_close(dg.get(), want_g, 1e-7, 1e-4, "cross-entropy backward");
  }
}

TEST_F(CudaKernels, FusedOptimizerUpdatesMatchTheCpuReference) {
  const std::int64_t n = 10007;
  auto p0 = rand_vec(n, 11), g = rand_vec(n, 12), s0 = rand_vec(n, 13, 0, 1);
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(variant);
    Tensor cp = Tensor::from_vector({n}, std::span<const float>(p0)), cg = Tensor::from_vector({n}, std::span<const float>(g));
    Tensor cm = Tensor::from_vector({n}, std::span<const float>(s0)), cv = Tensor::from_vector({n}, std::span<const float>(s0));
    Tensor dp = cp.to(Device::CUDA), dg = cg.to(Device::CUDA), dm = cm.to(Device::CUDA), dv = cv.to(Device::CUDA);
    if (variant < 2) {
      SgdUpdate u{0.1f, 0.9f, 0.0f, 0.01f, variant == 1, false};
      sgd_update(cp, cg, cm, u);
      sgd_update(dp, dg, dm, u);
    } else {
      AdamUpdate u{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, variant == 3, 0.19f, 0.002f, 0.1f, 0.001f};
      adam_update(cp, cg, cm, cv, u);
      adam_update(dp, dg, dm, dv, u);
    }
    expect_close(dp.to_vector(), cp.to_vector(), 1e-7, 1e-6, "param");
    expect_close(dm.to_vector(), cm.to_vector(), 1e-7, 1e-6, "state");
  }
}

// Three steps of the same model on each device (the GPU one moved there before its optimizer was
// made), from batch x, y on the CPU: the losses agree at each step and the parameters after them.
void expect_three_steps_alike(nn::Module& cpu_model, nn::Module& gpu_model, optim::Optimizer& co, optim::Optimizer& go,
                              const Tensor& x, const Tensor& y, Tensor (*loss)(const Tensor&, const Tensor&)) {
  Tensor gx = x.to(Device::CUDA), gy = y.to(Device::CUDA);
  for (int s = 0; s < 3; ++s) {
    co.zero_grad();
    go.zero_grad();
    Tensor lc = loss(cpu_model(x), y), lg = loss(gpu_model(gx), gy);
    EXPECT_NEAR(lg.item(), lc.item(), 1e-5 * std::abs(lc.item()));
    lc.backward();
    lg.backward();
    co.step();
    go.step();
  }
  expect_close(nn::flatten_f32(gpu_model.named_parameters()), nn::flatten_f32(cpu_model.named_parameters()), 1e-5,
               1e-4, "parameters after 3 steps");
}

TEST_F(CudaKernels, TrainingStepOnCudaMatchesCpu) {
  // The whole path through Tensor, autograd and the optimizer: one model on each device, same
  // seed, same batch, three Adam steps.
  auto cpu_model = nn::mlp({13, 17, 3}, nn::Activation::Tanh, 5), gpu_model = nn::mlp({13, 17, 3}, nn::Activation::Tanh, 5);
  gpu_model->to(Device::CUDA);
  optim::Adam co(cpu_model->named_parameters(), {.lr = 1e-2}), go(gpu_model->named_parameters(), {.lr = 1e-2});
  Tensor x = Tensor::from_vector({29, 13}, std::span<const float>(rand_vec(29 * 13, 14)));
  Tensor y = Tensor::from_vector({29, 3}, std::span<const float>(rand_vec(29 * 3, 15)));
  expect_three_steps_alike(*cpu_model, *gpu_model, co, go, x, y, mse_loss);
}

TEST_F(CudaKernels, CrossEntropyTrainingStepOnCudaMatchesCpu) {
  // As above, through tensor::cross_entropy_loss: one-hot targets, three SGD steps.
  auto cpu_model = nn::mlp({13, 17, 5}, nn::Activation::ReLU, 6), gpu_model = nn::mlp({13, 17, 5}, nn::Activation::ReLU, 6);
  gpu_model->to(Device::CUDA);
  optim::SGD co(cpu_model->named_parameters(), {.lr = 0.1}), go(gpu_model->named_parameters(), {.lr = 0.1});
  Tensor x = Tensor::from_vector({29, 13}, std::span<const float>(rand_vec(29 * 13, 18)));
  std::vector<float> onehot(29 * 5, 0.0f);
  for (std::size_t i = 0; i < 29; ++i) onehot[i * 5 + (i * 3) % 5] = 1.0f;
  Tensor y = Tensor::from_vector({29, 5}, std::span<const float>(onehot));
  expect_three_steps_alike(*cpu_model, *gpu_model, co, go, x, y, cross_entropy_loss);
}

TEST(CudaRuntime, ErrorsCarryFileAndLine) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  // An absurd allocation fails in cudaMalloc and must come back as ftcc::Error with the location.
  try {
    cuda::device_alloc(std::size_t{1} << 60);
    FAIL() << "a 1 EiB allocation succeeded";
  } catch (const ftcc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("runtime.cu:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ftcc::tensor

// Exit status 77 tells meson the test was skipped (no device) rather than passed.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  if (rc == 0 && !ftcc::tensor::cuda_available()) return 77;
  return rc;
}
