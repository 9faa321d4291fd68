// recovery/group_environment.hpp: what ResilientGroup reads from the process environment, read
// once, when the group is constructed (recovery/group_environment.cpp), and kept in one value.
// Nothing in recovery/ reads these variables anywhere else, so a setting cannot differ between
// the start of a job and a later recovery, and a bad value is refused before any communication.
#pragma once

#include <string>

namespace ftcc::recovery {

struct GroupEnvironment {
  double ulfm_timeout_s = 60;       // FTCC_ULFM_TIMEOUT_S: deadline of shrink/agree when the option is 0
  std::string oob_addr;             // FTCC_OOB_ADDR: the heartbeat's address on a multi-host job
  std::string oob_if;               // FTCC_OOB_IF: the heartbeat's interface or network (CIDR)
  std::string btl_tcp_if_include;   // OMPI_MCA_btl_tcp_if_include: the network MPI was told to use
  bool ulfm_detector = false;       // OMPI_MCA_mpi_ft_detector is "true" or "1"

  // Reads the variables. Throws InvalidArgument (what, which variable, the accepted range) on a
  // FTCC_ULFM_TIMEOUT_S that is not a number from 0.001 to 1e6.
  static GroupEnvironment read();
};

}  // namespace ftcc::recovery
