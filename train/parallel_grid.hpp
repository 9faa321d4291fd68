// train/parallel_grid.hpp: how the ranks of a model-parallel job are laid out: `replicas` copies
// of the model (the data-parallel dimension), each cut over `model` ranks (pp stages or tp
// shards). Pure functions, no MPI; unit-tested in tests/train/parallel_grid_test.cpp.
//
// Rank r < active() is position r % model of replica r / model (so replica 0 is ranks
// 0..model-1 and rank 0 is always active); ranks from active() on are idle: they take part in the
// step's commit and in recoveries, hold no part of the model, and join the grid again at the next
// recovery. Replica k trains on the rows [k B / replicas, (k+1) B / replicas) of each global batch
// of B rows; the gradients of each position are summed over the replicas.
//
// choose_grid(ranks, model_size, max_model, batch, micro_batches): the grid over `ranks` ranks
// that does the most useful work, with models cut over at least model_size ranks (no rank holds
// more of the model than the user asked for; fewer only when fewer ranks or cuts are left, then
// over as many as there are), model <= max_model and replicas <= batch. Useful work: the busy
// ranks (model x replicas), times, for a pipeline (micro_batches > 0), the share of its time
// outside the bubble, M / (M + model - 1) with M = min(micro_batches, rows per replica). For tp
// (micro_batches = 0) it is the busy ranks alone: the cost of tp's per-layer allreduces over a
// wider group depends on the machine and is not modelled. Among equals the smallest model. It
// depends on nothing else, so every rank (a spare or a respawned process too) computes the same
// grid. At the start (ranks a multiple of model_size) it is ranks / model_size replicas of
// model_size ranks; after a failure, fewer replicas of the same cut or replicas cut over more
// ranks, whichever scores higher (docs/model-parallel.md has worked cases and figures).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ftcc::train {

struct ParallelGrid {
  int ranks = 1, model = 1, replicas = 1;

  int active() const { return model * replicas; }
  bool is_active(int r) const { return r < active(); }
  int replica_of(int r) const { return r / model; }
  int position_of(int r) const { return r % model; }
  // The ranks of replica k (its model group) and of position p in every replica (its dp group).
  std::vector<int> replica_ranks(int k) const;
  std::vector<int> position_ranks(int p) const;
  // The rows of a global batch of `batch` rows that replica k trains on: [first, second).
  std::pair<std::int64_t, std::int64_t> rows_of(int k, std::int64_t batch) const;
  // A pipeline's rows of replica k and their micro-batches. Each replica cuts its own rows
  // (rows_of) into min(micro_batches, its rows) micro-batches; with shared = true (--deterministic)
  // the global batch is cut into min(micro_batches, batch) micro-batches, the same ones for any
  // grid, and replica k takes the whole micro-batches [k M / replicas, (k+1) M / replicas) of them
  // (none when M < replicas).
  struct MicroBatches {
    std::int64_t begin = 0, end = 0;  // the replica's rows [begin, end) of the global batch
    std::vector<std::int64_t> cuts;   // micro-batch j is rows [begin + cuts[j], begin + cuts[j+1])
  };
  MicroBatches micro_batches_of(int k, std::int64_t batch, std::int64_t micro_batches, bool shared) const;
  // "2 replicas x 2 ranks" (+ ", 1 idle")
  std::string describe() const;
  bool operator==(const ParallelGrid&) const = default;
};

// Throws ftcc::Error when no grid exists (max_model < 1 or ranks < 1).
ParallelGrid choose_grid(int ranks, int model_size, int max_model, std::int64_t batch, std::int64_t micro_batches = 0);

}  // namespace ftcc::train
