#include "ftcc/comm/types.hpp"

#include <string>

#include "ftcc/base/error.hpp"

namespace ftcc::comm {

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::i16: return "i16";
    case DType::boolean: return "bool";
  }
  return "?";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::band: return "band";
    case ReduceOp::bor: return "bor";
    case ReduceOp::bxor: return "bxor";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "u8" || s == "uint8") return DType::u8;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "i8" || s == "int8") return DType::i8;
  if (s == "i16" || s == "int16") return DType::i16;
  if (s == "bool") return DType::boolean;
  FTCC_CHECK(false) << "unknown dtype '" << std::string(s) << "' (f32, f64, i32, i64, u8, f16, bf16, i8, i16, bool)";
  return DType::f32;
}

ReduceOp parse_op(std::string_view s) {
  if (s == "sum") return ReduceOp::sum;
  if (s == "prod") return ReduceOp::prod;
  if (s == "min") return ReduceOp::min;
  if (s == "max") return ReduceOp::max;
  if (s == "band") return ReduceOp::band;
  if (s == "bor") return ReduceOp::bor;
  if (s == "bxor") return ReduceOp::bxor;
  FTCC_CHECK(false) << "unknown reduction op '" << std::string(s) << "' (sum, prod, min, max, band, bor, bxor)";
  return ReduceOp::sum;
}

}  // namespace ftcc::comm
