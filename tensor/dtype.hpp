// tensor/dtype.hpp: element types, devices and shapes of ftcc tensors.
//
// Only float32 (training) and float64 (gradient checks, exact references) exist. Shapes have up to
// four dimensions and are always row-major contiguous; a view never changes the strides, it only
// moves the start (see Tensor::rows). Add a dtype by extending DType, dtype_size() and the
// dispatch in tensor/kernels.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ftcc::tensor {

enum class DType : std::uint8_t { F32, F64 };
enum class Device : std::uint8_t { CPU, CUDA };

using Shape = std::vector<std::int64_t>;

inline constexpr int kMaxDims = 4;
// Most elements of one tensor: its size in bytes (at most 8 per element) fits in int64.
inline constexpr std::int64_t kMaxNumel = std::int64_t{1} << 60;

inline std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 8; }
inline const char* dtype_name(DType t) { return t == DType::F32 ? "float32" : "float64"; }
inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<double>() { return DType::F64; }

// Number of elements of a shape; validates rank and non-negative extents.
std::int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

}  // namespace ftcc::tensor
