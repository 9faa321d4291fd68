// train/partition.hpp: how the layers of a model are cut into contiguous pipeline stages, and
// which copy of each layer's state a pipeline rebuilds itself from after a failure. Pure
// functions (no MPI), unit-tested in tests/train/partition_test.cpp.
//
// Layer unit: layer i is Linear(widths[i], widths[i+1]) together with the activation that follows
// it (none after the last), so a model of W widths has W-1 layers; its cost is its parameter
// count in*out + out.
//
// partition_layers(cost, parts): boundaries b[0]=0 < b[1] < ... < b[parts]=L, stage s holds the
// layers [b[s], b[s+1]); every stage gets at least one layer; the largest stage cost is the
// smallest possible (exact dynamic program, O(parts L^2)); among the optimal cuts the one with
// the earliest boundaries is taken, so every rank computes the same cut. Requires 1 <= parts <= L.
//
// plan_restore(holdings, L): holdings[r] lists the (layer, step) states that rank r still holds
// (its own snapshots and the replicas of its predecessors). The plan is the newest step s at which
// every layer has a holder, and for each layer the lowest rank holding it at s. When no such
// step exists, `lost` names the layers that no rank holds at any step shared by the others
// (the newest step at which the most layers are covered is used to name them).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ftcc::train {

// Parameter count of each layer of an MLP with these widths.
std::vector<std::int64_t> layer_costs(const std::vector<std::int64_t>& widths);

std::vector<int> partition_layers(const std::vector<std::int64_t>& cost, int parts);

// The stage (index into boundaries) that holds `layer`.
int stage_of(const std::vector<int>& boundaries, int layer);

struct LayerHolding {
  int layer = 0;
  std::int64_t step = 0;
};

struct RestorePlan {
  std::int64_t step = -1;         // the step every layer is restored to; -1 when state was lost
  std::vector<int> holder;        // per layer: the rank that sends it (size L when step >= 0)
  std::vector<int> lost;          // layers with no holder (when step == -1)
};

RestorePlan plan_restore(const std::vector<std::vector<LayerHolding>>& holdings, int num_layers);

}  // namespace ftcc::train
