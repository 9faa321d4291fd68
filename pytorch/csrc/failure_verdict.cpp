#include "failure_verdict.hpp"

#include "ftcc/base/error.hpp"
#include "ftcc/comm/errors.hpp"

namespace ftcc::torch_backend {

Verdict classify(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const comm::FaultDetected& x) {
    return {Verdict::fault, x.what()};
  } catch (const comm::Timeout& x) {
    return {Verdict::deadline, std::string(x.what()) +
                                   " (a rank that neither answers nor dies: raise FTCC_COMM_TIMEOUT_S, or let the "
                                   "heartbeat fence it: FTCC_HANG_TIMEOUT_S)"};
  } catch (const comm::CommError& x) {
    return {Verdict::broken, x.what()};
  } catch (const ftcc::InternalError& x) {
    return {Verdict::broken, x.what()};
  } catch (const std::exception& x) {
    return {Verdict::call_error, x.what()};
  } catch (...) {
    return {Verdict::call_error, "an unknown exception"};
  }
}

}  // namespace ftcc::torch_backend
