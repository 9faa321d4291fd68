// comm/types.hpp: element types and reduction operators of the collectives.
//
// comm/ works on raw buffers: (pointer, count of elements, DType). A count is always size_t, never
// an int byte count, so buffers past 2 GiB work. To add a dtype: extend DType, dtype_size,
// to_string/parse_dtype and the dispatch in reduce_kernels.cpp (and the MPI type in the tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ftcc/base/dtype.hpp"

namespace ftcc::comm {

using ftcc::DType;  // one enum for comm and tensor: base/dtype.hpp
using ftcc::dtype_of;
using ftcc::dtype_size;
// band/bor/bxor: bitwise, integer and boolean types only (comm::reduce refuses them on floats).
// boolean: sum is logical or, prod logical and (as torch's backends treat bool).
enum class ReduceOp : std::uint8_t { sum, prod, min, max, band, bor, bxor };

const char* to_string(DType t);
const char* to_string(ReduceOp op);
// "f32"/"float32"/"float", "f64"/"float64"/"double", "i32"/"int32", "i64"/"int64", "u8"/"uint8",
// "f16"/"float16"/"half", "bf16"/"bfloat16"; throws InvalidArgument.
DType parse_dtype(std::string_view s);
// "sum", "prod", "min", "max"; throws InvalidArgument.
ReduceOp parse_op(std::string_view s);

}  // namespace ftcc::comm
