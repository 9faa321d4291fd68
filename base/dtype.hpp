// base/dtype.hpp: element types, one enum for every layer.
//
// comm/ moves and reduces all four (raw buffers); tensor/ computes in f32 (training) and f64
// (gradient checks, exact references) and refuses the integer types when a tensor is made.
// To add a type: extend DType, dtype_size and dtype_name here, then the dispatch of the layer
// that needs it (comm/reduce_kernels.cpp, tensor/kernels.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ftcc {

enum class DType : std::uint8_t { f32, f64, i32, i64 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

// "float32", "float64", "int32", "int64" (PyTorch's names).
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
  }
  return "?";
}

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

}  // namespace ftcc
