#include "ftcc/comm/errors.hpp"

#include <sstream>

namespace ftcc::comm {
namespace {

std::string join(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

}  // namespace

ProcessFailed::ProcessFailed(std::string op, std::vector<int> failed_ranks, int mpi_error_class, std::int64_t step)
    : FaultDetected(std::move(op),
                    "peer process failed (failed ranks: [" + join(failed_ranks) + "]" +
                        (step >= 0 ? ", step " + std::to_string(step) : std::string()) + ")",
                    mpi_error_class),
      failed_ranks_(std::move(failed_ranks)),
      step_(step) {}

Timeout::Timeout(std::string op, std::vector<int> pending_peers, double waited_s)
    : CommError(std::move(op),
                "timed out after " + std::to_string(waited_s) + " s waiting for peer(s) [" + join(pending_peers) + "]"),
      pending_peers_(std::move(pending_peers)),
      waited_s_(waited_s) {}

}  // namespace ftcc::comm
