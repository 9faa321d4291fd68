// bench/engine/state_digest_bench.cpp: what silent-data-corruption checks cost per byte of state.
//
//  * BM_StateDigest/bytes: train::state_digest (train/replica_verifier.hpp), the digest that replica
//    verification (--verify-every) and the check of state at rest (--verify-at-rest,
//    train/state_at_rest.hpp) take of every rank's parameters and optimizer state.
//  * BM_ReadBaseline/bytes: a plain sum of the same 8-byte words, which the compiler vectorizes:
//    the floor for any pass that reads the state once.
// Both report bytes/s. The check of state at rest digests the state twice per step (sealed after
// the optimizer step, checked before the next one), so a step pays about 2 x state bytes / this rate.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

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
BENCHMARK(BM_ReadBaseline)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
