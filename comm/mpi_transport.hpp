// comm/mpi_transport.hpp: Transport on MPI_Isend / MPI_Irecv / MPI_Test.
//
// Messages of more than 1 GiB are sent as several MPI messages of at most 1 GiB with the same
// tag (MPI's int counts), matched in order on the other side. Every MPI return code goes
// through FTCC_MPI_CHECK, so a dead peer under ULFM surfaces as ProcessFailed / Revoked.
// The communicator is not owned; Communicator manages its lifetime.
#pragma once

#include <mpi.h>

#include <vector>

#include "ftcc/comm/transport.hpp"

namespace ftcc::comm {

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int tag_upper_bound() const override { return tag_ub_; }
  Handle isend(const void* buf, std::size_t bytes, int peer, int tag, const char* op) override;
  Handle irecv(void* buf, std::size_t bytes, int peer, int tag, const char* op) override;
  bool test(Handle h, const char* op) override;
  bool abandon(Handle h) noexcept override;
  bool revoked() const override;
  std::unique_ptr<Transport> clone() const override;
  MPI_Comm mpi_comm() const override { return comm_; }

  // Largest single MPI message; bigger transfers are split (tests lower it to reach that path).
  static constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 30;

 private:
  struct Slot {
    std::vector<MPI_Request> reqs;  // one per piece of <= kMaxMessageBytes; MPI_REQUEST_NULL when done
    int peer = -1;
    bool recv = false;
    bool busy = false;
  };
  Handle start(void* buf, std::size_t bytes, int peer, int tag, bool recv, const char* op);
  Handle alloc_slot();
  void release(Handle h);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
  std::vector<Slot> slots_;
  std::vector<Handle> free_;
};

}  // namespace ftcc::comm
