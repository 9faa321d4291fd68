// comm/tree_phases.hpp: pipelined broadcast down and reduction up a tree (internal), shared by
// broadcast, reduce and tree_allreduce.
//
// A TreeShape is one rank's view of the tree: its parent (-1 at the root) and its children.
// Messages are cut into segments; a rank forwards segment j as soon as it has it, with up to
// `window` segments in flight, so a chain becomes a pipeline and a tree a pipelined tree.
#pragma once

#include <cstddef>
#include <vector>

#include "ftcc/comm/op_context.hpp"
#include "ftcc/comm/types.hpp"

namespace ftcc::comm::detail {

struct TreeShape {
  int parent = -1;
  std::vector<int> children;  // in the order the reduction combines them / the broadcast feeds them
};

// Binomial tree rooted at `root`. For the broadcast, children come largest subtree first (it
// has the longest way to go); for the reduction, smallest first (it reports first).
TreeShape binomial_tree(int rank, int size, int root, bool for_broadcast);
// root -> root+1 -> ... -> root-1: one hop per rank, the best pipeline for large messages.
TreeShape chain_tree(int rank, int size, int root);

struct TreeParams {
  std::size_t segment_bytes = std::size_t{64} * 1024;
  int window = 4;
};

// Broadcast `bytes` bytes of buf from the tree's root to every rank.
void tree_broadcast(OpContext& ctx, void* buf, std::size_t bytes, const TreeShape& tree, const TreeParams& p);

// Reduce src over all ranks into acc at the root. Ranks with children stage their partial result
// in acc (count elements), or in scratch slot 1 when acc is nullptr (not allowed at the root); a
// leaf's acc is not touched. acc may be src.
// Children are combined in a fixed order, so the result does not depend on message timing.
void tree_reduce(OpContext& ctx, const void* src, void* acc, std::size_t count, DType dtype, ReduceOp op,
                 const TreeShape& tree, const TreeParams& p);

}  // namespace ftcc::comm::detail
