// comm/types.hpp: element types and reduction operators of the collectives.
//
// comm/ works on raw buffers: (pointer, count of elements, DType). A count is always size_t, never
// an int byte count, so buffers past 2 GiB work. To add a dtype: extend DType, dtype_size,
// to_string/parse_dtype and the dispatch in reduce_kernels.cpp (and the MPI type in the tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ftcc::comm {

enum class DType : std::uint8_t { f32, f64, i32, i64 };
enum class ReduceOp : std::uint8_t { sum, prod, min, max };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

const char* to_string(DType t);
const char* to_string(ReduceOp op);
// "f32"/"float32"/"float", "f64"/"float64"/"double", "i32"/"int32", "i64"/"int64"; throws InvalidArgument.
DType parse_dtype(std::string_view s);
// "sum", "prod", "min", "max"; throws InvalidArgument.
ReduceOp parse_op(std::string_view s);

}  // namespace ftcc::comm
