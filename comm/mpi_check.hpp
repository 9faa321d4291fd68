// comm/mpi_check.hpp: turn an MPI return code into a typed exception (comm/errors.hpp).
//
// The error *class* (MPI_Error_class) decides, never the raw code:
//   MPIX_ERR_PROC_FAILED / _PENDING -> ProcessFailed (failed ranks read with MPIX_Comm_get_failed)
//   MPIX_ERR_REVOKED                -> Revoked
//   anything else                   -> CommError with MPI's error string
// Every communicator ftcc uses must have MPI_ERRORS_RETURN set, or MPI aborts before we see a code.
//
//   FTCC_MPI_CHECK(MPI_Send(...), comm, "ring_allreduce send");
#pragma once

#include <mpi.h>

#include <vector>

#include "ftcc/comm/errors.hpp"

namespace ftcc::comm {

// Throws the exception matching rc (see above) if rc != MPI_SUCCESS. `op` names the operation.
void throw_mpi_error(int rc, MPI_Comm comm, const char* op, const char* file, int line);

// Ranks of `comm` that this process knows to have failed (empty without ULFM).
std::vector<int> known_failed_ranks(MPI_Comm comm);

// MPIX_ERR_REVOKED (0 without ULFM): the class a Revoked carries when ftcc noticed the revoke itself.
int revoked_error_class();

// True when `error_class` is a ULFM failure class (PROC_FAILED, PROC_FAILED_PENDING, REVOKED).
bool is_fault_class(int error_class);

}  // namespace ftcc::comm

#define FTCC_MPI_CHECK(call, on_comm, op_name)                                          \
  do {                                                                          \
    const int ftcc_mpi_rc_ = (call);                                            \
    if (ftcc_mpi_rc_ != MPI_SUCCESS)                                            \
      ::ftcc::comm::throw_mpi_error(ftcc_mpi_rc_, (on_comm), (op_name), __FILE__, __LINE__); \
  } while (0)
