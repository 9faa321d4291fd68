// bench/engine/cpu_engine_bench.cpp: the CPU engine against its own baseline.
//
//  * BM_LinearForwardBackward/B/in/out: ftcc's Linear forward (fused GEMM + bias) and backward
//    (dX, dW, db) through the autograd graph, i.e. what a training step pays per layer.
//  * BM_EigenGemmBaseline/B/in/out: the three bare Eigen GEMMs of the same shapes
//    (Y = X W^T, dX = dY W, dW = dY^T X) on preallocated buffers: the floor for the above.
//    Goal: Linear within 10% of the bare GEMMs.
//  * BM_MlpTrainStep: one step of the digits model (64-64-10 ReLU, batch 32, MSE, Adam).
// Both report FLOP/s for the 6 B in out flops of the three GEMMs.
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include "ftcc/nn/sequential.hpp"
#include "ftcc/optim/adam.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/random.hpp"

namespace {

using ftcc::tensor::Tensor;

Tensor random(const ftcc::tensor::Shape& s, std::uint64_t seed) {
  Tensor t = Tensor::empty(s);
  ftcc::tensor::Philox(seed).fill_uniform(std::span<float>(t.data(), static_cast<std::size_t>(t.numel())), -1, 1);
  return t;
}

void set_flops(benchmark::State& state, std::int64_t b, std::int64_t in, std::int64_t out) {
  state.counters["FLOP/s"] = benchmark::Counter(6.0 * static_cast<double>(b * in * out),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LinearForwardBackward(benchmark::State& state) {
  const std::int64_t b = state.range(0), in = state.range(1), out = state.range(2);
  Tensor x = random({b, in}, 1), w = random({out, in}, 2), bias = random({out}, 3), dy = random({b, out}, 4);
  x.requires_grad_();  // a hidden layer: dX is needed
  w.requires_grad_();
  bias.requires_grad_();
  for (auto _ : state) {
    Tensor y = ftcc::tensor::linear(x, w, bias);
    ftcc::tensor::run_backward(y, dy);
    benchmark::DoNotOptimize(w.grad().data());
  }
  set_flops(state, b, in, out);
}

void BM_EigenGemmBaseline(benchmark::State& state) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::int64_t b = state.range(0), in = state.range(1), out = state.range(2);
  Mat x = Mat::Random(b, in), w = Mat::Random(out, in), dy = Mat::Random(b, out);
  Mat y(b, out), dx(b, in), dw(out, in);
  for (auto _ : state) {
    y.noalias() = x * w.transpose();
    dx.noalias() = dy * w;
    dw.noalias() = dy.transpose() * x;
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dw.data());
  }
  set_flops(state, b, in, out);
}

void linear_sizes(benchmark::internal::Benchmark* bm) {
  bm->Args({32, 64, 64})->Args({256, 512, 512})->Args({1024, 1024, 1024})->Args({4096, 256, 10})->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_LinearForwardBackward)->Apply(linear_sizes);
BENCHMARK(BM_EigenGemmBaseline)->Apply(linear_sizes);

void BM_MlpTrainStep(benchmark::State& state) {
  auto model = ftcc::nn::mlp({64, 64, 10}, ftcc::nn::Activation::ReLU, 1);
  ftcc::optim::Adam opt(model->named_parameters(), {});
  Tensor x = random({32, 64}, 5), y = random({32, 10}, 6);
  for (auto _ : state) {
    opt.zero_grad();
    ftcc::tensor::mse_loss((*model)(x), y).backward();
    opt.step();
  }
  state.SetItemsProcessed(state.iterations() * 32);  // samples/s
}
BENCHMARK(BM_MlpTrainStep)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
