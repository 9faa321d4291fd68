// comm/errors.hpp: the typed exceptions every comm/ call throws instead of aborting.
//
//   CommError       any MPI failure that is not one of the below (carries MPI's error string)
//   ProcessFailed   a peer died (ULFM class MPIX_ERR_PROC_FAILED[_PENDING]); failed_ranks are
//                   ranks of the communicator the operation ran on, as far as known locally
//   Revoked         the communicator was revoked by some rank (ULFM class MPIX_ERR_REVOKED);
//                   treat it as "a failure happened elsewhere"
//   Timeout         a wait passed its deadline; names the operation, the peers still pending and
//                   how long it waited
//   NotSupported    a fault-tolerance entry point was used with an MPI built without ULFM
//   CollectiveMismatch  the ranks called different collectives (kind, dtype, count, op or root)
//                   at the same point; thrown on every rank that compared them, with the same
//                   message naming each rank's call (comm/shm_steps.hpp says where it is checked)
//
// ProcessFailed and Revoked are what the recovery layer catches; both derive from
// FaultDetected so a single catch covers "some rank is gone".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"

namespace ftcc::comm {

class CommError : public ftcc::Error {
 public:
  CommError(std::string op, const std::string& message, int mpi_error_class = 0)
      : ftcc::Error(op + ": " + message), op_(std::move(op)), mpi_error_class_(mpi_error_class) {}
  const std::string& op() const { return op_; }
  int mpi_error_class() const { return mpi_error_class_; }

 private:
  std::string op_;
  int mpi_error_class_;
};

// Base of the two ULFM failure notifications.
class FaultDetected : public CommError {
 public:
  using CommError::CommError;
};

class ProcessFailed : public FaultDetected {
 public:
  ProcessFailed(std::string op, std::vector<int> failed_ranks, int mpi_error_class, std::int64_t step = -1);
  const std::vector<int>& failed_ranks() const { return failed_ranks_; }
  std::int64_t step() const { return step_; }

 private:
  std::vector<int> failed_ranks_;
  std::int64_t step_;
};

class Revoked : public FaultDetected {
 public:
  Revoked(std::string op, int mpi_error_class)
      : FaultDetected(std::move(op), "communicator revoked (a rank failed somewhere)", mpi_error_class) {}
};

class Timeout : public CommError {
 public:
  Timeout(std::string op, std::vector<int> pending_peers, double waited_s);
  const std::vector<int>& pending_peers() const { return pending_peers_; }
  double waited_s() const { return waited_s_; }

 private:
  std::vector<int> pending_peers_;
  double waited_s_;
};

class NotSupported : public CommError {
 public:
  using CommError::CommError;
};

class CollectiveMismatch : public CommError {
 public:
  CollectiveMismatch(std::string op, const std::string& message) : CommError(std::move(op), message) {}
};

}  // namespace ftcc::comm
