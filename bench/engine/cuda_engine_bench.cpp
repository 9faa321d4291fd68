// bench/engine/cuda_engine_bench.cpp: ftcc's own CUDA kernels against their baselines, timed
// with CUDA events (device time only), after a correctness check of the same configuration.
//
//  * BM_OwnGemm / BM_CublasGemm (n = m = k): FLOP/s = 2 n^3 / time. Goal at 4096: own >= 70%.
//  * BM_MseForwardBackward/n vs BM_DeviceCopy/n: achieved bandwidth. MSE forward reads p and t
//    (8n bytes), backward reads p and t and writes gp (12n bytes): 20n bytes per iteration.
//    A device-to-device copy of n floats moves 8n bytes (read + write). Goal: MSE >= 80% of copy.
// Without a device every benchmark reports "no CUDA device" and skips.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "ftcc/tensor/cuda/check.cuh"
#include "ftcc/tensor/cuda/kernels.hpp"
#include "ftcc/tensor/cuda/runtime.hpp"
#include "ftcc/tensor/kernels_cpu.hpp"
#include "ftcc/tensor/random.hpp"

namespace {

namespace cuda = ftcc::tensor::cuda;

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n, std::uint64_t seed) : n(n) {
    std::vector<float> h(n);
    ftcc::tensor::Philox(seed).fill_uniform(h, -1, 1);
    p = static_cast<float*>(cuda::device_alloc(n * 4));
    cuda::copy(p, true, h.data(), false, n * 4);
  }
  ~DeviceBuffer() { cuda::device_free(p); }
  std::vector<float> host() const {
    std::vector<float> h(n);
    cuda::copy(h.data(), false, p, true, n * 4);
    return h;
  }
  std::size_t n;
  float* p = nullptr;
};

// Times `body` with CUDA events over the benchmark loop; reports manual time per iteration.
template <class F>
void timed(benchmark::State& state, F&& body) {
  cudaEvent_t a, b;
  FTCC_CUDA_CHECK(cudaEventCreate(&a));
  FTCC_CUDA_CHECK(cudaEventCreate(&b));
  body();  // warm-up (module load, caches)
  FTCC_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : state) {
    FTCC_CUDA_CHECK(cudaEventRecord(a));
    body();
    FTCC_CUDA_CHECK(cudaEventRecord(b));
    FTCC_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    FTCC_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    state.SetIterationTime(ms / 1e3);
  }
  FTCC_CUDA_CHECK(cudaEventDestroy(a));
  FTCC_CUDA_CHECK(cudaEventDestroy(b));
}

bool have_device(benchmark::State& state) {
  if (cuda::device_count() > 0) return true;
  state.SkipWithError("no CUDA device");
  for (auto _ : state) {
  }
  return false;
}

// Checks C against cuBLAS on a sample of entries before timing (validate before timing).
bool gemm_agrees(std::int64_t n, const DeviceBuffer& a, const DeviceBuffer& b) {
  DeviceBuffer c1(static_cast<std::size_t>(n * n), 1), c2(static_cast<std::size_t>(n * n), 2);
  cuda::gemm<float>(false, false, n, n, n, a.p, b.p, c1.p, nullptr, false);
  cuda::gemm_cublas<float>(false, false, n, n, n, a.p, b.p, c2.p, false);
  auto h1 = c1.host(), h2 = c2.host();
  for (std::size_t i = 0; i < h1.size(); i += 997)
    if (std::abs(h1[i] - h2[i]) > 1e-5 + 1e-6 * static_cast<double>(n)) return false;
  return true;
}

void gemm_bench(benchmark::State& state, bool own) {
  if (!have_device(state)) return;
  const std::int64_t n = state.range(0);
  DeviceBuffer a(static_cast<std::size_t>(n * n), 3), b(static_cast<std::size_t>(n * n), 4),
      c(static_cast<std::size_t>(n * n), 5);
  if (own && !gemm_agrees(n, a, b)) {
    state.SkipWithError("own GEMM disagrees with cuBLAS");
    return;
  }
  timed(state, [&] {
    if (own) cuda::gemm<float>(false, false, n, n, n, a.p, b.p, c.p, nullptr, false);
    else cuda::gemm_cublas<float>(false, false, n, n, n, a.p, b.p, c.p, false);
  });
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n * n * n), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_OwnGemm(benchmark::State& s) { gemm_bench(s, true); }
void BM_CublasGemm(benchmark::State& s) { gemm_bench(s, false); }
BENCHMARK(BM_OwnGemm)->Arg(1024)->Arg(2048)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CublasGemm)->Arg(1024)->Arg(2048)->Arg(4096)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_MseForwardBackward(benchmark::State& state) {
  if (!have_device(state)) return;
  const std::int64_t n = state.range(0);
  DeviceBuffer p(static_cast<std::size_t>(n), 6), t(static_cast<std::size_t>(n), 7), gp(static_cast<std::size_t>(n), 8),
      loss(1, 9), g(1, 10);
  timed(state, [&] {
    cuda::mse_forward<float>(n, p.p, t.p, loss.p);
    cuda::mse_backward<float>(n, p.p, t.p, g.p, gp.p);
  });
  state.SetBytesProcessed(state.iterations() * 20 * n);
}

void BM_DeviceCopy(benchmark::State& state) {
  if (!have_device(state)) return;
  const std::int64_t n = state.range(0);
  DeviceBuffer src(static_cast<std::size_t>(n), 11), dst(static_cast<std::size_t>(n), 12);
  timed(state, [&] {
    FTCC_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice));
  });
  state.SetBytesProcessed(state.iterations() * 8 * n);
}
BENCHMARK(BM_MseForwardBackward)->Arg(1 << 24)->Arg(1 << 27)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DeviceCopy)->Arg(1 << 24)->Arg(1 << 27)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
