#include "ftcc/comm/mpi_check.hpp"

#include <string>

#include "ftcc_config.hpp"
#if FTCC_HAVE_ULFM
#include <mpi-ext.h>
#endif

namespace ftcc::comm {

int revoked_error_class() {
#if FTCC_HAVE_ULFM
  return MPIX_ERR_REVOKED;
#else
  return 0;
#endif
}

bool is_fault_class(int error_class) {
#if FTCC_HAVE_ULFM
  return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING ||
         error_class == MPIX_ERR_REVOKED;
#else
  (void)error_class;
  return false;
#endif
}

std::vector<int> known_failed_ranks(MPI_Comm comm) {
  std::vector<int> out;
#if FTCC_HAVE_ULFM
  MPI_Group failed = MPI_GROUP_NULL, all = MPI_GROUP_NULL;
  if (MPIX_Comm_get_failed(comm, &failed) != MPI_SUCCESS) return out;
  int n = 0;
  MPI_Group_size(failed, &n);
  if (n > 0 && MPI_Comm_group(comm, &all) == MPI_SUCCESS) {
    std::vector<int> in(n), mapped(n);
    for (int i = 0; i < n; ++i) in[i] = i;
    MPI_Group_translate_ranks(failed, n, in.data(), all, mapped.data());
    for (int r : mapped)
      if (r != MPI_UNDEFINED) out.push_back(r);
    MPI_Group_free(&all);
  }
  MPI_Group_free(&failed);
#else
  (void)comm;
#endif
  return out;
}

void throw_mpi_error(int rc, MPI_Comm comm, const char* op, const char* file, int line) {
  int cls = rc;
  MPI_Error_class(rc, &cls);
  const std::string where = std::string(op) + " (" + file + ":" + std::to_string(line) + ")";
#if FTCC_HAVE_ULFM
  if (cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_PROC_FAILED_PENDING)
    throw ProcessFailed(where, known_failed_ranks(comm), cls);
  if (cls == MPIX_ERR_REVOKED) throw Revoked(where, cls);
#else
  (void)comm;
#endif
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(where, std::string(msg, static_cast<size_t>(len)) + " (MPI error class " + std::to_string(cls) + ")",
                  cls);
}

}  // namespace ftcc::comm
