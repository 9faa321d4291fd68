#include "ftcc/comm/mpi_transport.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "ftcc/comm/mpi_check.hpp"
#include "ftcc_config.hpp"
#if FTCC_HAVE_ULFM
#include <mpi-ext.h>
#endif

namespace ftcc::comm {
namespace {

// Requests we gave up on but that may still be active. They are never MPI_Request_free'd while
// active: when such a freed request later completes in error (a revoke, a dead peer), Open MPI
// reports it on MPI_COMM_NULL, whose handler aborts the process. Instead they wait here and are
// tested again whenever a transport starts a new operation, until they complete one way or the
// other. Shared by all transports (a communicator may be gone before its requests are).
std::mutex g_grave_mu;
std::vector<MPI_Request> g_graveyard;
std::atomic<bool> g_graves{false};

void bury(MPI_Request r) {
  std::lock_guard<std::mutex> lock(g_grave_mu);
  g_graveyard.push_back(r);
  g_graves.store(true, std::memory_order_relaxed);
}

void reap() {
  if (!g_graves.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(g_grave_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  std::size_t kept = 0;
  for (MPI_Request& r : g_graveyard) {
    int flag = 0;
    if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag || r == MPI_REQUEST_NULL) continue;
    g_graveyard[kept++] = r;
  }
  g_graveyard.resize(kept);
  g_graves.store(kept != 0, std::memory_order_relaxed);
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  FTCC_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), comm_, "MPI_Comm_rank");
  FTCC_MPI_CHECK(MPI_Comm_size(comm_, &size_), comm_, "MPI_Comm_size");
  void* attr = nullptr;
  int flag = 0;
  FTCC_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &attr, &flag), comm_, "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (flag && attr) tag_ub_ = *static_cast<int*>(attr);
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
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
  reap();
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
    int flag = 0;
    if (s.recv) {
      // Give the cancel (or a revoke / failure notification) a moment to complete the request.
      MPI_Cancel(&r);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
      while (r != MPI_REQUEST_NULL) {
        if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;  // completed in error: done
        if (flag || std::chrono::steady_clock::now() > until) break;
        std::this_thread::yield();
      }
    } else {
      // Cancelling sends is deprecated; the library only reads a send buffer.
      MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    }
    if (!flag && r != MPI_REQUEST_NULL) {
      bury(r);
      if (s.recv) safe = false;  // the library may still write into the buffer
    }
  }
  release(h);
  return safe;
}

bool MpiTransport::revoked() const {
#if FTCC_HAVE_ULFM
  int flag = 0;
  return MPIX_Comm_is_revoked(comm_, &flag) == MPI_SUCCESS && flag != 0;
#else
  return false;
#endif
}

}  // namespace ftcc::comm
