// train/partition.hpp: how the layers of a model are cut into contiguous pipeline stages. Pure
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

}  // namespace ftcc::train
