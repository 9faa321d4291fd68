#include "comm/ulfm.hpp"

#include <string>

#include "comm/mpi_check.hpp"
#include "ftcc_config.hpp"
#if FTCC_HAVE_ULFM
#include <mpi-ext.h>
#endif

namespace ftcc::comm {

bool has_ulfm() {
#if FTCC_HAVE_ULFM
  // Open MPI exposes whether the runtime turned fault tolerance on (mpirun --with-ft ulfm)
  // through the MPI_FT attribute... not portable; compile-time support is what we can check.
  return true;
#else
  return false;
#endif
}

void require_ulfm(const char* what) {
  if (!has_ulfm())
    throw NotSupported(what,
                       "this ftcc was built against an MPI without ULFM fault tolerance "
                       "(no MPIX_Comm_shrink in mpi-ext.h). Run tools/setup, which installs Open MPI 5 "
                       "with ULFM, and rebuild; launch with tools/ftcc-run.");
}

#if FTCC_HAVE_ULFM
void revoke(MPI_Comm comm) { FTCC_MPI_CHECK(MPIX_Comm_revoke(comm), comm, "MPIX_Comm_revoke"); }

MPI_Comm shrink(MPI_Comm comm) {
  MPI_Comm out = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPIX_Comm_shrink(comm, &out), comm, "MPIX_Comm_shrink");
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return out;
}

unsigned agree(MPI_Comm comm, unsigned flag) {
  int f = static_cast<int>(flag);
  FTCC_MPI_CHECK(MPIX_Comm_agree(comm, &f), comm, "MPIX_Comm_agree");
  return static_cast<unsigned>(f);
}

void ack_failed(MPI_Comm comm) {
  int acked = 0;
  FTCC_MPI_CHECK(MPIX_Comm_ack_failed(comm, 1 << 30, &acked), comm, "MPIX_Comm_ack_failed");
}

bool is_revoked(MPI_Comm comm) {
  int flag = 0;
  FTCC_MPI_CHECK(MPIX_Comm_is_revoked(comm, &flag), comm, "MPIX_Comm_is_revoked");
  return flag != 0;
}
#else
void revoke(MPI_Comm) { require_ulfm("revoke"); }
MPI_Comm shrink(MPI_Comm) {
  require_ulfm("shrink");
  return MPI_COMM_NULL;
}
unsigned agree(MPI_Comm, unsigned) {
  require_ulfm("agree");
  return 0;
}
void ack_failed(MPI_Comm) { require_ulfm("ack_failed"); }
bool is_revoked(MPI_Comm) { return false; }
#endif

}  // namespace ftcc::comm
