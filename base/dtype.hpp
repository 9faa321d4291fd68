// base/dtype.hpp: element types, one enum for every layer.
//
// comm/ moves and reduces all ten (raw buffers; boolean is one byte, 0 or 1; f16 and bf16 are IEEE binary16 and bfloat16
// bit patterns in a uint16_t, reduced through float and rounded to nearest even, the way PyTorch's
// CPU kernels do); tensor/ computes in f32 (training) and f64 (gradient checks, exact references)
// and refuses the others when a tensor is made.
// To add a type: extend DType, dtype_size and dtype_name here, then the dispatch of the layer
// that needs it (comm/reduce_kernels.cpp, tensor/kernels.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ftcc {

enum class DType : std::uint8_t { f32, f64, i32, i64, u8, f16, bf16, i8, i16, boolean };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i8: return 1;
    case DType::i16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}

// "float32", "float64", "int32", "int64", "uint8", "float16", "bfloat16", "int8", "int16", "bool"
// (PyTorch's names).
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i8: return "int8";
    case DType::i16: return "int16";
    case DType::boolean: return "bool";
  }
  return "?";
}

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<std::int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<std::int16_t>() { return DType::i16; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

// Integer types (and boolean): the ones the bitwise reductions take.
constexpr bool dtype_is_integral(DType t) {
  return t == DType::i32 || t == DType::i64 || t == DType::u8 || t == DType::i8 || t == DType::i16 ||
         t == DType::boolean;
}

}  // namespace ftcc
