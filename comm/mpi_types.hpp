// comm/mpi_types.hpp: the MPI counterparts of comm's element types and reduction operators, for
// code that calls MPI's own collectives on the same buffers (the benchmark's baseline, the
// tests' references, a program that mixes both).
//
//   MPI_Allreduce(send, recv, n, mpi_datatype(DType::f32), mpi_op(ReduceOp::sum), comm);
//
// f32 -> MPI_FLOAT, f64 -> MPI_DOUBLE, i32 -> MPI_INT32_T, i64 -> MPI_INT64_T;
// sum/prod/min/max -> MPI_SUM/MPI_PROD/MPI_MIN/MPI_MAX. A value outside the enums throws
// ftcc::InvalidArgument (never a silent MPI_BYTE). A new DType or ReduceOp gets its case here.
#pragma once

#include <mpi.h>

#include "ftcc/comm/types.hpp"

namespace ftcc::comm {

MPI_Datatype mpi_datatype(DType t);
MPI_Op mpi_op(ReduceOp op);

}  // namespace ftcc::comm
