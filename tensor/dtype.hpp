// tensor/dtype.hpp: element types, devices and shapes of ftcc tensors.
//
// Only float32 (training) and float64 (gradient checks, exact references) exist. Shapes have up to
// four dimensions and are always row-major contiguous; a view never changes the strides, it only
// moves the start (see Tensor::rows). Add a dtype by extending DType (base/dtype.hpp), the
// check in tensor.cpp and the dispatch in tensor/kernels.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ftcc/base/dtype.hpp"

namespace ftcc::tensor {

using ftcc::DType;  // one enum for comm and tensor (base/dtype.hpp); tensors hold f32 or f64 only
using ftcc::dtype_name;
using ftcc::dtype_of;
using ftcc::dtype_size;
enum class Device : std::uint8_t { CPU, CUDA };

using Shape = std::vector<std::int64_t>;

inline constexpr int kMaxDims = 4;
// Most elements of one tensor: its size in bytes (at most 8 per element) fits in int64.
inline constexpr std::int64_t kMaxNumel = std::int64_t{1} << 60;

inline const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

// Number of elements of a shape; validates rank and non-negative extents.
std::int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

}  // namespace ftcc::tensor
