#include "ftcc/recovery/mpi_ft_comm.hpp"

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/recovery/process_spawn.hpp"

namespace ftcc::recovery {

std::unique_ptr<MpiFtComm> MpiFtComm::take(MPI_Comm raw, double timeout_s) {
  MPI_Comm_set_errhandler(raw, MPI_ERRORS_RETURN);
  comm::CommOptions co;
  co.timeout_s = timeout_s;
  return std::make_unique<MpiFtComm>(
      std::make_unique<comm::Communicator>(raw, comm::Communicator::Ownership::take, co));
}

void MpiFtComm::revoke() {
  try {
    comm::revoke(c_->raw());
  } catch (const std::exception&) {
    // already revoked by a peer: the agreements and the shrink sort it out
  }
}

FtShrunk MpiFtComm::shrink() {
  comm::Shrunk s = comm::shrink_and_translate(c_->raw());
  return {take(s.comm, c_->timeout_s()), std::move(s.kept), std::move(s.lost)};
}

comm::Agreement MpiFtComm::agree(unsigned flag) { return comm::agree_uniform(c_->raw(), flag); }

comm::Agreement MpiFtComm::agree_polled(unsigned flag, const std::function<void()>& idle) {
  return comm::agree_uniform_polled(c_->raw(), flag, idle);
}

void MpiFtComm::allgather(const std::int64_t* mine, std::int64_t* all, std::size_t words) {
  comm::allgather(*c_, mine, all, words, comm::DType::i64);
}

std::unique_ptr<FtComm> MpiFtComm::split(int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPI_Comm_split(c_->raw(), color >= 0 ? color : MPI_UNDEFINED, key, &out), c_->raw(), "MPI_Comm_split");
  if (out == MPI_COMM_NULL) return nullptr;
  return take(out, c_->timeout_s());
}

void MpiFtComm::broadcast(std::int64_t* words, std::size_t n, int root) {
  comm::broadcast(*c_, words, n, comm::DType::i64, root);
}

std::unique_ptr<FtComm> MpiFtComm::spawn_merged(int k) { return take(spawn_and_merge(c_->raw(), k), c_->timeout_s()); }

}  // namespace ftcc::recovery
