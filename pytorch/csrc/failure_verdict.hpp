// pytorch/csrc/failure_verdict.hpp: the one place the torch backend decides what an exception
// from an operation means (gloo's ProcessGroupGloo runs every work item through one funnel too).
//   fault       a peer died or the communicator was revoked (comm::FaultDetected): recover
//   deadline    a peer neither answered nor died within the deadline (comm::Timeout)
//   broken      any other communication error (comm::CommError, ftcc::InternalError): the group
//               cannot go on
//   call_error  the call itself was wrong (a torch check, ftcc::InvalidArgument found before any
//               message was sent, ...): the caller gets it and the group stays usable
#pragma once

#include <exception>
#include <string>

namespace ftcc::torch_backend {

struct Verdict {
  enum Kind { fault, deadline, broken, call_error } kind = call_error;
  std::string message;  // one line
};

Verdict classify(std::exception_ptr e);

}  // namespace ftcc::torch_backend
