// comm/ring_phases.hpp: the two halves of a ring allreduce, shared by ring_allreduce,
// reduce_scatter and allgather (internal).
//
// Ranks form a ring (send right to rank+1, receive from the left, rank-1). The buffer is cut into
// size() blocks (blocks[b], element offsets into the buffers). Each of the n-1 steps moves one
// block per rank one hop, cut into segments so that sending, receiving and reducing overlap:
// segment j of step s+1 leaves as soon as segment j of step s arrived, with up to `window`
// segments in flight per direction.
#pragma once

#include <cstddef>
#include <vector>

#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/op_context.hpp"
#include "ftcc/comm/types.hpp"

namespace ftcc::comm::detail {

struct RingParams {
  std::size_t segment_bytes = std::size_t{256} * 1024;
  int window = 4;
};

// Reduce-scatter. Rank r's contribution is src (all blocks); on return work[blocks[r]] holds the
// reduction over all ranks of block r. Other blocks of work hold partial results. work may be src.
// Step s sends block r-s-1 and receives block r-s-2, which it combines with its own data
// (work = src op incoming), so block r is complete after step n-2.
void ring_reduce_scatter(OpContext& ctx, const void* src, void* work, const std::vector<Block>& blocks,
                         DType dtype, ReduceOp op, const RingParams& p);

// Allgather. On entry buf[blocks[r]] holds rank r's block; on return every block is filled.
// Step s sends block r-s (received in step s-1) and receives block r-s-1 in place.
void ring_allgather(OpContext& ctx, void* buf, const std::vector<Block>& blocks, DType dtype, const RingParams& p);

}  // namespace ftcc::comm::detail
