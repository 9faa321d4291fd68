// bench/engine/state_digest_bench.cpp: what silent-data-corruption checks cost per byte of state.
//
//  * BM_StateDigest/bytes: train::state_digest (train/replica_verifier.hpp), the digest that replica
//    verification (--verify-every) and the check of state at rest (--verify-at-rest,
//    train/state_at_rest.hpp) take of every rank's parameters and optimizer state.
//  * BM_SumChecksumF32/bytes, BM_SumChecksumI64/bytes: comm::sum_checksum (comm/reduction_audit.hpp),
//    which --verify-reductions takes of every bucket's contribution and result (f32; i64: the
//    fixed-point sums of --deterministic).
//  * BM_ReadBaseline/bytes: a plain sum of the same 8-byte words, which the compiler vectorizes:
//    the floor for any pass that reads the state once.
// Both report bytes/s. The check of state at rest digests the state twice per step (sealed after
// the optimizer step, checked before the next one), so a step pays about 2 x state bytes / this rate.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "ftcc/comm/reduction_audit.hpp"
#include "ftcc/train/replica_verifier.hpp"

namespace {

std::vector<std::byte> state_of(std::size_t bytes) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  return v;
}

void BM_StateDigest(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const auto v = state_of(bytes);
  for (auto _ : state) benchmark::DoNotOptimize(ftcc::train::state_digest(v));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

template <class T>
void sum_checksum_bench(benchmark::State& state, ftcc::DType dtype) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const auto raw = state_of(bytes);
  std::vector<T> v(bytes / sizeof(T));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(static_cast<int>(raw[i]) - 128) / T{64};
  for (auto _ : state) benchmark::DoNotOptimize(ftcc::comm::sum_checksum(v.data(), v.size(), dtype));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
void BM_SumChecksumF32(benchmark::State& state) { sum_checksum_bench<float>(state, ftcc::DType::f32); }
void BM_SumChecksumI64(benchmark::State& state) { sum_checksum_bench<std::int64_t>(state, ftcc::DType::i64); }

void BM_ReadBaseline(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const auto v = state_of(bytes);
  std::vector<std::uint64_t> w(bytes / 8);
  std::memcpy(w.data(), v.data(), w.size() * 8);
  for (auto _ : state) benchmark::DoNotOptimize(std::accumulate(w.begin(), w.end(), std::uint64_t{0}));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void sizes(benchmark::internal::Benchmark* bm) {
  bm->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(64 << 20)->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_StateDigest)->Apply(sizes);
BENCHMARK(BM_SumChecksumF32)->Apply(sizes);
BENCHMARK(BM_SumChecksumI64)->Apply(sizes);
BENCHMARK(BM_ReadBaseline)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
