// comm/ulfm.hpp: the ULFM primitives, wrapped so that callers never touch MPIX_ directly.
//
// All of them throw NotSupported when ftcc was built against an MPI without ULFM
// (has_ulfm() == false), naming tools/setup as the way to get one.
//   revoke(comm)           every pending and future operation on comm fails on every rank
//   shrink(comm)           a new communicator of the survivors (ranks renumbered in order),
//                          with MPI_ERRORS_RETURN already set; the caller owns it
//   agree(comm, flag)      fault-tolerant bitwise AND of flag over the survivors; works on a
//                          revoked communicator. Returns the AND; throws ProcessFailed if a
//                          failure was newly noticed during the agreement (the value is then
//                          still agreed among the survivors: see ULFM spec, MPIX_Comm_agree)
//   agree_uniform(comm, flag)  the same, but a failure noticed during the agreement is
//                          acknowledged and reported in the result instead of thrown: the flag
//                          (AND over the ranks that contributed) and failure_noticed are the
//                          same on every survivor (the spec raises PROC_FAILED consistently)
//   ack_failed(comm)       acknowledge the failures seen so far (so agree stops reporting them)
//   is_revoked(comm)
#pragma once

#include <mpi.h>

namespace ftcc::comm {

// True when this build has ULFM (compile time) and the runtime enabled it (mpirun --with-ft ulfm).
bool has_ulfm();
bool ulfm_compiled();
// Open MPI: the job was launched with --with-ft ulfm (OMPI_MCA_mpi_ft_enable); other MPIs: true.
bool ulfm_enabled_at_run_time();

void revoke(MPI_Comm comm);
MPI_Comm shrink(MPI_Comm comm);
unsigned agree(MPI_Comm comm, unsigned flag);
struct Agreement {
  unsigned flag = 0;
  bool failure_noticed = false;
};
Agreement agree_uniform(MPI_Comm comm, unsigned flag);
void ack_failed(MPI_Comm comm);
bool is_revoked(MPI_Comm comm);

// Throws NotSupported("what") unless has_ulfm(). Call it at the start of fault-tolerant entry points.
void require_ulfm(const char* what);

}  // namespace ftcc::comm
