// recovery/group_environment.cpp: GroupEnvironment::read (recovery/group_environment.hpp).
#include "ftcc/recovery/group_environment.hpp"

#include <cstdlib>
#include <string>

#include "ftcc/base/env_number.hpp"

namespace ftcc::recovery {
namespace {

std::string env_text(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  return v ? v : "";
}

}  // namespace

GroupEnvironment GroupEnvironment::read() {
  GroupEnvironment e;
  // Parsed like a flag (base/env_number.hpp): "5abc" is not 5; refused on every rank alike.
  e.ulfm_timeout_s = env_seconds("FTCC_ULFM_TIMEOUT_S", 60, 0.001, 1e6);
  e.oob_addr = env_text("FTCC_OOB_ADDR");
  e.oob_if = env_text("FTCC_OOB_IF");
  e.btl_tcp_if_include = env_text("OMPI_MCA_btl_tcp_if_include");
  const std::string detector = env_text("OMPI_MCA_mpi_ft_detector");
  e.ulfm_detector = detector == "true" || detector == "1";
  return e;
}

}  // namespace ftcc::recovery
