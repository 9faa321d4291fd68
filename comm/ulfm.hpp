// comm/ulfm.hpp: the ULFM primitives, wrapped so that callers never touch MPIX_ directly.
//
// All of them throw NotSupported when ftcc was built against an MPI without ULFM
// (has_ulfm() == false), naming tools/setup as the way to get one.
//   revoke(comm)           every pending and future operation on comm fails on every rank
//   shrink(comm)           a new communicator of the survivors (ranks renumbered in order),
//                          with MPI_ERRORS_RETURN already set; the caller owns it
//   shrink_and_translate(comm)  shrink, plus who is kept and who is lost, in comm's numbering
//                          (below)
//   agree(comm, flag)      fault-tolerant bitwise AND of flag over the survivors; works on a
//                          revoked communicator. Returns the AND; throws ProcessFailed if a
//                          failure was newly noticed during the agreement (the value is then
//                          still agreed among the survivors: see ULFM spec, MPIX_Comm_agree)
//   agree_uniform(comm, flag)  the same, but a failure noticed during the agreement is
//                          acknowledged and reported in the result instead of thrown: the flag
//                          (AND over the ranks that contributed) and failure_noticed are the
//                          same on every survivor (the spec raises PROC_FAILED consistently)
//   agree_uniform_polled(comm, flag, idle)  agree_uniform through MPIX_Comm_iagree, calling
//                          idle() between tests (about every millisecond) while it waits: for a
//                          process that may wait there for a whole run (a hot spare) and must
//                          stay responsive (its watchdog kicked, no thread blocked in MPI)
//   ack_failed(comm)       acknowledge the failures seen so far (so agree stops reporting them)
//   is_revoked(comm)
#pragma once

#include <mpi.h>

#include <functional>
#include <vector>

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
Agreement agree_uniform_polled(MPI_Comm comm, unsigned flag, const std::function<void()>& idle);

// The shrink half of the ULFM spec's MPIX_Comm_replace example: shrink, then translate the new
// group into the old one (MPI_Group_translate_ranks). The agreement and the retry stay with the
// caller, whose protocol decides what is agreed on (ftcc: recovery/resilient_group.cpp).
// Pre: comm has MPI_ERRORS_RETURN (it may be revoked). Post: `comm` is untouched; every
// survivor gets the same kept/lost lists. Throws what shrink throws (FaultDetected: a failure
// during the shrink itself; retry) and nothing is leaked then. It has no deadline of its own:
// run it under one (recovery/call_deadline.hpp).
struct Shrunk {
  MPI_Comm comm = MPI_COMM_NULL;  // the survivors, renumbered in order; MPI_ERRORS_RETURN; the caller owns it
  std::vector<int> kept;          // kept[i]: the rank in `comm` of new rank i (ascending)
  std::vector<int> lost;          // ranks of `comm` missing from the new communicator (ascending)
};
Shrunk shrink_and_translate(MPI_Comm comm);
void ack_failed(MPI_Comm comm);
bool is_revoked(MPI_Comm comm);

// Throws NotSupported("what") unless has_ulfm(). Call it at the start of fault-tolerant entry points.
void require_ulfm(const char* what);

}  // namespace ftcc::comm
