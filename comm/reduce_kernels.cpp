#include "ftcc/comm/reduce_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ftcc/base/error.hpp"

namespace ftcc::comm {
namespace {

// Plain loops the compiler vectorizes; out may alias a or b exactly, so no __restrict.
template <class T, class F>
void apply(void* out, const void* a, const void* b, std::size_t n, F f) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

// Integer overflow wraps (two's complement, as MPI implementations do) instead of being UB.
template <class T>
T wrap_add(T u, T v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(u) + static_cast<std::make_unsigned_t<T>>(v));
  else
    return u + v;
}
template <class T>
T wrap_mul(T u, T v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(u) * static_cast<std::make_unsigned_t<T>>(v));
  else
    return u * v;
}

// 16-bit floats: each element goes through float and is rounded back to nearest even, as
// PyTorch's CPU kernels (and gloo's) do for Half and BFloat16.
float f16_to_float(std::uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
std::uint16_t float_to_f16(float f) {
  const auto v = static_cast<_Float16>(f);  // IEEE round to nearest even (libgcc)
  std::uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

template <float (*Load)(std::uint16_t), std::uint16_t (*Store)(float)>
void reduce_half(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  auto run = [&](auto f) {
    for (std::size_t i = 0; i < n; ++i) o[i] = Store(f(Load(x[i]), Load(y[i])));
  };
  switch (op) {
    case ReduceOp::sum: run([](float u, float v) { return u + v; }); break;
    case ReduceOp::prod: run([](float u, float v) { return u * v; }); break;
    case ReduceOp::min: run([](float u, float v) { return std::min(u, v); }); break;
    case ReduceOp::max: run([](float u, float v) { return std::max(u, v); }); break;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor: FTCC_CHECK(false) << "comm::reduce: " << to_string(op) << " of floating-point elements"; break;
  }
}

template <class T>
void reduce_typed(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceOp::band: apply<T>(out, a, b, n, [](T u, T v) { return static_cast<T>(u & v); }); return;
      case ReduceOp::bor: apply<T>(out, a, b, n, [](T u, T v) { return static_cast<T>(u | v); }); return;
      case ReduceOp::bxor: apply<T>(out, a, b, n, [](T u, T v) { return static_cast<T>(u ^ v); }); return;
      default: break;
    }
  }
  switch (op) {
    case ReduceOp::sum: apply<T>(out, a, b, n, [](T u, T v) { return wrap_add(u, v); }); break;
    case ReduceOp::prod: apply<T>(out, a, b, n, [](T u, T v) { return wrap_mul(u, v); }); break;
    case ReduceOp::min: apply<T>(out, a, b, n, [](T u, T v) { return std::min(u, v); }); break;
    case ReduceOp::max: apply<T>(out, a, b, n, [](T u, T v) { return std::max(u, v); }); break;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor: FTCC_CHECK(false) << "comm::reduce: " << to_string(op) << " of floating-point elements"; break;
  }
}

// Booleans as bytes 0/1: sum is or, prod is and, min and max as they are, bitwise ops bitwise.
void reduce_bool(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  using T = std::uint8_t;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::max:
    case ReduceOp::bor: apply<T>(out, a, b, n, [](T u, T v) { return static_cast<T>((u | v) != 0); }); break;
    case ReduceOp::prod:
    case ReduceOp::min:
    case ReduceOp::band: apply<T>(out, a, b, n, [](T u, T v) { return static_cast<T>((u != 0) & (v != 0)); }); break;
    case ReduceOp::bxor: apply<T>(out, a, b, n, [](T u, T v) { return static_cast<T>((u != 0) != (v != 0)); }); break;
  }
}

}  // namespace

void reduce(void* out, const void* a, const void* b, std::size_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32: reduce_typed<float>(out, a, b, count, op); break;
    case DType::f64: reduce_typed<double>(out, a, b, count, op); break;
    case DType::i32: reduce_typed<std::int32_t>(out, a, b, count, op); break;
    case DType::i64: reduce_typed<std::int64_t>(out, a, b, count, op); break;
    case DType::u8: reduce_typed<std::uint8_t>(out, a, b, count, op); break;
    case DType::f16: reduce_half<f16_to_float, float_to_f16>(out, a, b, count, op); break;
    case DType::bf16: reduce_half<bf16_to_float, float_to_bf16>(out, a, b, count, op); break;
    case DType::i8: reduce_typed<std::int8_t>(out, a, b, count, op); break;
    case DType::i16: reduce_typed<std::int16_t>(out, a, b, count, op); break;
    case DType::boolean: reduce_bool(out, a, b, count, op); break;
  }
}

}  // namespace ftcc::comm
