// recovery/mpi_ft_comm.hpp: FtComm (recovery/ft_comm.hpp) on an MPI communicator with ULFM.
//
// Owns a comm::Communicator (MPI_ERRORS_RETURN set); revoke/shrink/agree are comm/ulfm.hpp's,
// allgather and broadcast are comm/'s, split is MPI_Comm_split, spawn_merged is
// recovery/process_spawn.hpp's. New communicators (shrink, split, spawn) keep this one's timeout. Errors: comm::FaultDetected for failures and revocation, comm::CommError
// for the rest, comm::NotSupported without ULFM.
#pragma once

#include <memory>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/recovery/ft_comm.hpp"

namespace ftcc::recovery {

class MpiFtComm final : public FtComm {
 public:
  explicit MpiFtComm(std::unique_ptr<comm::Communicator> c) : c_(std::move(c)) {}
  // Takes an MPI communicator (freed with this object), with the timeout of `like`.
  static std::unique_ptr<MpiFtComm> take(MPI_Comm raw, double timeout_s);

  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  void revoke() override;
  FtShrunk shrink() override;
  comm::Agreement agree(unsigned flag) override;
  comm::Agreement agree_polled(unsigned flag, const std::function<void()>& idle) override;
  void allgather(const std::int64_t* mine, std::int64_t* all, std::size_t words) override;
  std::unique_ptr<FtComm> split(int color, int key) override;
  void broadcast(std::int64_t* words, std::size_t n, int root) override;
  std::unique_ptr<FtComm> spawn_merged(int k) override;
  comm::Communicator* communicator() override { return c_.get(); }

 private:
  std::unique_ptr<comm::Communicator> c_;
};

}  // namespace ftcc::recovery
