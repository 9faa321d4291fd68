// A program that embeds ftcc the way a user would: installed headers and library, found with
// `pkg-config --cflags --libs ftcc`. Run on 2 ranks by tests/embed/embed_test.sh.
#include <mpi.h>

#include <cstdio>

#include <comm/errors.hpp>
#include <comm/mpi_check.hpp>
#include <comm/ulfm.hpp>
#include <ftcc_config.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int one = 1, sum = 0;
  FTCC_MPI_CHECK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_COMM_WORLD, "embed allreduce");
  if (rank == 0)
    std::printf("embed_example: %s ftcc %s, ulfm=%d, %d ranks\n", sum == size ? "ok" : "WRONG", FTCC_VERSION,
                ftcc::comm::has_ulfm() ? 1 : 0, size);
  MPI_Finalize();
  return sum == size ? 0 : 1;
}
