// recovery/process_spawn.cpp: see process_spawn.hpp.
#include "ftcc/recovery/process_spawn.hpp"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/mpi_check.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX, for the spawned processes' environment

namespace ftcc::recovery {
namespace {

// This program and its arguments (/proc/self/cmdline; the executable by /proc/self/exe, so a
// relative argv[0] works from any folder).
std::vector<std::string> own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find('\0', at);
    argv.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  FTCC_CHECK_T(::ftcc::Error, n > 0 && !argv.empty()) << "respawn: cannot read this program's command line from /proc/self";
  argv[0].assign(exe, static_cast<std::size_t>(n));
  return argv;
}

// What the new processes inherit, newline-separated for Open MPI's PMIX_ENVAR spawn key: the
// FTCC_* variables (job folder, terminal), OMPI_MCA_* and PMIX_MCA_* (ULFM on) and the sanitizers'
// options. (PMIx's datastore is the runtime's choice, not the new process's: under a sanitizer
// the whole job runs with PMIX_MCA_gds=hash, tests/reliability/sanitizers.sh.)
std::string inherited_environment() {
  std::string out;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.find('\n') != std::string::npos) continue;
    // Not FTCC_OOB_ADDR: it names this host's address, and a new process may run on another.
    const bool ours = (v.rfind("FTCC_", 0) == 0 && v.rfind("FTCC_OOB_ADDR=", 0) != 0) || v.rfind("OMPI_MCA_", 0) == 0 ||
                      v.rfind("PMIX_MCA_", 0) == 0 || v.rfind("ASAN_OPTIONS=", 0) == 0 ||
                      v.rfind("UBSAN_OPTIONS=", 0) == 0 || v.rfind("TSAN_OPTIONS=", 0) == 0 ||
                      v.rfind("LSAN_OPTIONS=", 0) == 0;
    if (ours) out += (out.empty() ? "" : "\n") + v;
  }
  return out;
}

}  // namespace

MPI_Comm spawn_and_merge(MPI_Comm pool, int k) {
  const std::vector<std::string> command = own_command();
  std::vector<char*> args;
  for (std::size_t i = 1; i < command.size(); ++i) args.push_back(const_cast<char*>(command[i].c_str()));
  args.push_back(nullptr);
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  const std::string env = inherited_environment();
  if (!env.empty()) MPI_Info_set(info, "PMIX_ENVAR", env.c_str());
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd)) MPI_Info_set(info, "wdir", cwd);
  MPI_Comm inter = MPI_COMM_NULL;
  std::vector<int> codes(static_cast<std::size_t>(k), MPI_SUCCESS);
  const int rc = MPI_Comm_spawn(command[0].c_str(), args.data(), k, info, 0, pool, &inter, codes.data());
  MPI_Info_free(&info);
  FTCC_MPI_CHECK(rc, pool, "MPI_Comm_spawn");
  for (int c : codes) FTCC_MPI_CHECK(c, pool, "MPI_Comm_spawn (a new process)");
  MPI_Comm merged = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPI_Intercomm_merge(inter, 0, &merged), inter, "MPI_Intercomm_merge");
  MPI_Comm_free(&inter);
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  return merged;
}

MPI_Comm merge_with_parent(MPI_Comm parent) {
  MPI_Comm merged = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPI_Intercomm_merge(parent, 1, &merged), parent, "MPI_Intercomm_merge");
  MPI_Comm_free(&parent);
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  return merged;
}

}  // namespace ftcc::recovery
