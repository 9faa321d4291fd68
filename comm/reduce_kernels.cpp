#include "ftcc/comm/reduce_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

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

template <class T>
void reduce_typed(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: apply<T>(out, a, b, n, [](T u, T v) { return wrap_add(u, v); }); break;
    case ReduceOp::prod: apply<T>(out, a, b, n, [](T u, T v) { return wrap_mul(u, v); }); break;
    case ReduceOp::min: apply<T>(out, a, b, n, [](T u, T v) { return std::min(u, v); }); break;
    case ReduceOp::max: apply<T>(out, a, b, n, [](T u, T v) { return std::max(u, v); }); break;
  }
}

}  // namespace

void reduce(void* out, const void* a, const void* b, std::size_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32: reduce_typed<float>(out, a, b, count, op); break;
    case DType::f64: reduce_typed<double>(out, a, b, count, op); break;
    case DType::i32: reduce_typed<std::int32_t>(out, a, b, count, op); break;
    case DType::i64: reduce_typed<std::int64_t>(out, a, b, count, op); break;
  }
}

}  // namespace ftcc::comm
