#include "comm/mpi_transport.hpp"

#include <chrono>
#include <thread>

#include "comm/mpi_check.hpp"

namespace ftcc::comm {

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  FTCC_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), comm_, "MPI_Comm_rank");
  FTCC_MPI_CHECK(MPI_Comm_size(comm_, &size_), comm_, "MPI_Comm_size");
  void* attr = nullptr;
  int flag = 0;
  FTCC_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &attr, &flag), comm_, "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (flag && attr) tag_ub_ = *static_cast<int*>(attr);
}

MpiTransport::~MpiTransport() {
  for (Handle h = 0; h < slots_.size(); ++h)
    if (slots_[h].busy) abandon(h);
}

std::unique_ptr<Transport> MpiTransport::clone() const { return std::make_unique<MpiTransport>(comm_); }

Transport::Handle MpiTransport::alloc_slot() {
  if (free_.empty()) {
    slots_.emplace_back();
    return static_cast<Handle>(slots_.size() - 1);
  }
  Handle h = free_.back();
  free_.pop_back();
  return h;
}

void MpiTransport::release(Handle h) {
  slots_[h].busy = false;
  slots_[h].reqs.clear();
  free_.push_back(h);
}

Transport::Handle MpiTransport::start(void* buf, std::size_t bytes, int peer, int tag, bool recv, const char* op) {
  const Handle h = alloc_slot();
  Slot& s = slots_[h];
  s.peer = peer;
  s.recv = recv;
  s.busy = true;
  auto* p = static_cast<char*>(buf);
  std::size_t done = 0;
  // A zero-byte message is still one message (barrier tokens, empty blocks).
  do {
    const std::size_t piece = std::min(bytes - done, kMaxMessageBytes);
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = recv ? MPI_Irecv(p + done, static_cast<int>(piece), MPI_BYTE, peer, tag, comm_, &r)
                        : MPI_Isend(p + done, static_cast<int>(piece), MPI_BYTE, peer, tag, comm_, &r);
    if (rc != MPI_SUCCESS) {
      abandon(h);
      throw_mpi_error(rc, comm_, op, __FILE__, __LINE__);
    }
    s.reqs.push_back(r);
    done += piece;
  } while (done < bytes);
  return h;
}

Transport::Handle MpiTransport::isend(const void* buf, std::size_t bytes, int peer, int tag, const char* op) {
  return start(const_cast<void*>(buf), bytes, peer, tag, false, op);
}

Transport::Handle MpiTransport::irecv(void* buf, std::size_t bytes, int peer, int tag, const char* op) {
  return start(buf, bytes, peer, tag, true, op);
}

bool MpiTransport::test(Handle h, const char* op) {
  Slot& s = slots_[h];
  bool all = true;
  for (MPI_Request& r : s.reqs) {
    if (r == MPI_REQUEST_NULL) continue;
    int flag = 0;
    const int rc = MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      const int peer = s.peer;
      abandon(h);
      int cls = rc;
      MPI_Error_class(rc, &cls);
      if (is_fault_class(cls)) {
        // Name the peer we were talking to when ULFM has not (yet) listed any failed rank.
        try {
          throw_mpi_error(rc, comm_, op, __FILE__, __LINE__);
        } catch (const ProcessFailed& e) {
          if (!e.failed_ranks().empty()) throw;
          throw ProcessFailed(e.op(), {peer}, e.mpi_error_class());
        }
      }
      throw_mpi_error(rc, comm_, op, __FILE__, __LINE__);
    }
    if (!flag) {
      all = false;
      break;  // pieces complete in order; no need to poll the later ones yet
    }
  }
  if (all) release(h);
  return all;
}

bool MpiTransport::abandon(Handle h) noexcept {
  Slot& s = slots_[h];
  if (!s.busy) return true;
  bool safe = true;
  for (MPI_Request& r : s.reqs) {
    if (r == MPI_REQUEST_NULL) continue;
    if (!s.recv) {
      // Cancelling sends is deprecated; the library only reads a send buffer, so let it finish.
      MPI_Request_free(&r);
      continue;
    }
    MPI_Cancel(&r);
    // Give the cancel (or a revoke / failure notification) a moment to complete the request.
    int flag = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (r != MPI_REQUEST_NULL) {
      if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;  // completed in error: done
      if (flag) break;
      if (std::chrono::steady_clock::now() > until) break;
      std::this_thread::yield();
    }
    if (!flag && r != MPI_REQUEST_NULL) {
      MPI_Request_free(&r);
      safe = false;  // the library may still write into the buffer
    }
  }
  release(h);
  return safe;
}

}  // namespace ftcc::comm
