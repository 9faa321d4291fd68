// ulfm-probe: does this MPI survive the death of a rank?
//
// Used by tools/setup to choose an MPI. Every rank loops on MPI_Allreduce; rank
// (size-1) SIGKILLs itself at iteration 20. Survivors must get an error whose
// *class* is MPIX_ERR_PROC_FAILED or MPIX_ERR_REVOKED, revoke, shrink, and finish
// the loop with correct sums. Rank 0 prints "ulfm-probe: ok survivors=N" at the end.
// Deliberately standalone (no ftcc code): it runs before ftcc is built.
#include <mpi.h>
#include <mpi-ext.h>

#include <csignal>
#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int victim = size - 1;
  int recovered = 0;
  for (int it = 0; it < 100; ++it) {
    if (size > 1 && recovered == 0 && rank == victim && it == 20) raise(SIGKILL);
    int one = 1, sum = 0;
    int rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
    if (rc != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(rc, &cls);
      if (cls != MPIX_ERR_PROC_FAILED && cls != MPIX_ERR_REVOKED) {
        std::fprintf(stderr, "ulfm-probe: unexpected error class %d\n", cls);
        return 2;
      }
      MPIX_Comm_revoke(comm);
      MPI_Comm shrunk;
      if (MPIX_Comm_shrink(comm, &shrunk) != MPI_SUCCESS) {
        std::fprintf(stderr, "ulfm-probe: shrink failed\n");
        return 3;
      }
      MPI_Comm_free(&comm);
      comm = shrunk;
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &size);
      ++recovered;
      --it;  // redo the iteration on the survivors
      continue;
    }
    if (sum != size) {
      std::fprintf(stderr, "ulfm-probe: wrong sum %d on %d ranks\n", sum, size);
      return 4;
    }
  }
  if (rank == 0) std::printf("ulfm-probe: ok survivors=%d recoveries=%d\n", size, recovered);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
