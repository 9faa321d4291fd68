#include "ftcc/comm/ulfm.hpp"

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc_config.hpp"
#if FTCC_HAVE_ULFM
#include <mpi-ext.h>
#endif

namespace ftcc::comm {

bool has_ulfm() { return ulfm_compiled() && ulfm_enabled_at_run_time(); }

bool ulfm_compiled() { return FTCC_HAVE_ULFM != 0; }

bool ulfm_enabled_at_run_time() {
#if defined(OPEN_MPI) && OPEN_MPI
  // Open MPI 5 builds ULFM in but switches it on only when launched with --with-ft ulfm (or
  // --mca mpi_ft_enable 1), which reaches the ranks as this MCA variable. Without it the
  // runtime kills the whole job when one rank dies, whatever the application does.
  const char* v = std::getenv("OMPI_MCA_mpi_ft_enable");  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  return v && (std::string(v) == "1" || std::string(v) == "true");
#else
  return true;
#endif
}

void require_ulfm(const char* what) {
  if (!ulfm_compiled())
    throw NotSupported(what,
                       "this ftcc was built against an MPI without ULFM fault tolerance "
                       "(no MPIX_Comm_shrink in mpi-ext.h). Run tools/setup, which installs Open MPI 5 "
                       "with ULFM, and rebuild; launch with tools/ftcc-run.");
  if (!ulfm_enabled_at_run_time())
    throw NotSupported(what,
                       "ULFM fault tolerance is not enabled in this run: launch with tools/ftcc-run "
                       "(it passes mpirun --with-ft ulfm); a plain mpirun kills the whole job when a rank dies.");
}

#if FTCC_HAVE_ULFM
void revoke(MPI_Comm comm) { FTCC_MPI_CHECK(MPIX_Comm_revoke(comm), comm, "MPIX_Comm_revoke"); }

MPI_Comm shrink(MPI_Comm comm) {
  MPI_Comm out = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPIX_Comm_shrink(comm, &out), comm, "MPIX_Comm_shrink");
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return out;
}

Shrunk shrink_and_translate(MPI_Comm comm) {
  Shrunk out;
  out.comm = shrink(comm);
  MPI_Group old_g = MPI_GROUP_NULL, new_g = MPI_GROUP_NULL;
  try {
    // Group queries are local and allowed on a revoked communicator.
    FTCC_MPI_CHECK(MPI_Comm_group(comm, &old_g), comm, "MPI_Comm_group (old)");
    FTCC_MPI_CHECK(MPI_Comm_group(out.comm, &new_g), out.comm, "MPI_Comm_group (shrunk)");
    int old_n = 0, new_n = 0;
    MPI_Group_size(old_g, &old_n);
    MPI_Group_size(new_g, &new_n);
    std::vector<int> idx(static_cast<size_t>(new_n));
    std::iota(idx.begin(), idx.end(), 0);
    out.kept.assign(static_cast<size_t>(new_n), MPI_UNDEFINED);
    FTCC_MPI_CHECK(MPI_Group_translate_ranks(new_g, new_n, idx.data(), old_g, out.kept.data()), comm,
                   "MPI_Group_translate_ranks");
    std::vector<bool> alive(static_cast<size_t>(old_n), false);
    for (int o : out.kept) {
      FTCC_CHECK_T(ftcc::Error, o >= 0 && o < old_n) << "MPIX_Comm_shrink returned a rank (" << o << ") that the old communicator lacks";
      alive[static_cast<size_t>(o)] = true;
    }
    for (int r = 0; r < old_n; ++r)
      if (!alive[static_cast<size_t>(r)]) out.lost.push_back(r);
  } catch (...) {
    if (old_g != MPI_GROUP_NULL) MPI_Group_free(&old_g);
    if (new_g != MPI_GROUP_NULL) MPI_Group_free(&new_g);
    MPI_Comm_free(&out.comm);
    throw;
  }
  MPI_Group_free(&old_g);
  MPI_Group_free(&new_g);
  return out;
}

unsigned agree(MPI_Comm comm, unsigned flag) {
  int f = static_cast<int>(flag);
  FTCC_MPI_CHECK(MPIX_Comm_agree(comm, &f), comm, "MPIX_Comm_agree");
  return static_cast<unsigned>(f);
}

namespace {
// The end of an agreement that returned rc with value f: a failure noticed during it is
// acknowledged and reported (uniform on every survivor); any other error throws.
Agreement agreement_of(MPI_Comm comm, int rc, int f) {
  if (rc == MPI_SUCCESS) return {static_cast<unsigned>(f), false};
  int cls = MPI_SUCCESS;
  MPI_Error_class(rc, &cls);
  if (cls != MPIX_ERR_PROC_FAILED && cls != MPIX_ERR_PROC_FAILED_PENDING)
    FTCC_MPI_CHECK(rc, comm, "MPIX_Comm_agree");  // throws with the class and message
  ack_failed(comm);
  return {static_cast<unsigned>(f), true};
}
}  // namespace

Agreement agree_uniform(MPI_Comm comm, unsigned flag) {
  int f = static_cast<int>(flag);
  const int rc = MPIX_Comm_agree(comm, &f);
  return agreement_of(comm, rc, f);
}

Agreement agree_uniform_polled(MPI_Comm comm, unsigned flag, const std::function<void()>& idle) {
  int f = static_cast<int>(flag);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPIX_Comm_iagree(comm, &f, &req);
  while (rc == MPI_SUCCESS) {
    int done = 0;
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    idle();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return agreement_of(comm, rc, f);
}

void ack_failed(MPI_Comm comm) {
  int acked = 0, size = 0;
  MPI_Comm_size(comm, &size);  // acknowledge every failure known so far (at most all ranks)
  FTCC_MPI_CHECK(MPIX_Comm_ack_failed(comm, size, &acked), comm, "MPIX_Comm_ack_failed");
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
Shrunk shrink_and_translate(MPI_Comm) {
  require_ulfm("shrink_and_translate");
  return {};
}
unsigned agree(MPI_Comm, unsigned) {
  require_ulfm("agree");
  return 0;
}
Agreement agree_uniform(MPI_Comm, unsigned) {
  require_ulfm("agree");
  return {};
}
Agreement agree_uniform_polled(MPI_Comm, unsigned, const std::function<void()>&) {
  require_ulfm("agree");
  return {};
}
void ack_failed(MPI_Comm) { require_ulfm("ack_failed"); }
bool is_revoked(MPI_Comm) { return false; }
#endif

}  // namespace ftcc::comm
