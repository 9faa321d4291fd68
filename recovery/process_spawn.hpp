// recovery/process_spawn.hpp: new processes of this program for a respawn (MPI_Comm_spawn), on
// the MPI side of FtComm::spawn_merged (recovery/mpi_ft_comm.hpp) and of a new process's start.
//
// The new processes run this program with its arguments (/proc/self/exe, /proc/self/cmdline), its
// working folder and the part of its environment a job needs (FTCC_* but the out-of-band address,
// OMPI_MCA_*, PMIX_MCA_*, the sanitizers' options). Errors: comm::FaultDetected when a failure
// interrupts the spawn or the merge, comm::CommError otherwise, ftcc::Error when this program's
// command line cannot be read.
#pragma once

#include <mpi.h>

namespace ftcc::recovery {

// MPI_Comm_spawn of k copies of this program from `pool` (collective over it), merged with it:
// the pool's members first, the new processes after them. MPI_ERRORS_RETURN is set on the result.
MPI_Comm spawn_and_merge(MPI_Comm pool, int k);
// In a new process: the merge with the job that started it (`parent`: MPI_Comm_get_parent's; freed).
MPI_Comm merge_with_parent(MPI_Comm parent);

}  // namespace ftcc::recovery
