// comm/reduce_kernels.hpp: the elementwise reductions the collectives apply to received data.
//
// reduce(out, a, b, n, dtype, op): out[i] = a[i] op b[i]. `out` may alias `a` or `b` exactly
// (in-place accumulation); partial overlap is not allowed. The operators are commutative, and IEEE
// addition and multiplication are commutative bit for bit, so a op b == b op a on every rank: that
// is what lets the algorithms give every rank bitwise-identical results.
#pragma once

#include <cstddef>

#include "ftcc/comm/types.hpp"

namespace ftcc::comm {

void reduce(void* out, const void* a, const void* b, std::size_t count, DType dtype, ReduceOp op);

}  // namespace ftcc::comm
