#include "ftcc/comm/mpi_types.hpp"

#include "ftcc/base/error.hpp"

namespace ftcc::comm {

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::f16: return MPI_UINT16_T;   // moved as bits; comm/ reduces them itself
    case DType::bf16: return MPI_UINT16_T;
    case DType::i8: return MPI_INT8_T;
    case DType::i16: return MPI_INT16_T;
    case DType::boolean: return MPI_C_BOOL;
  }
  FTCC_CHECK(false) << "mpi_datatype: no MPI type for DType " << static_cast<int>(t);
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::prod: return MPI_PROD;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::band: return MPI_BAND;
    case ReduceOp::bor: return MPI_BOR;
    case ReduceOp::bxor: return MPI_BXOR;
  }
  FTCC_CHECK(false) << "mpi_op: no MPI operator for ReduceOp " << static_cast<int>(op);
  return MPI_OP_NULL;
}

}  // namespace ftcc::comm
