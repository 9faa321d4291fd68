// comm/transport.hpp: the small point-to-point interface every algorithm is written against.
//
// Two implementations: MpiTransport (comm/mpi_transport.hpp, the real one) and MemoryTransport
// (comm/memory_transport.hpp, ranks as threads of one process, for schedule tests without MPI).
// A Transport object is used by one thread at a time; a concurrent operation (a nonblocking
// allreduce) works on its own clone() of the same endpoint.
//
// Matching: a receive matches the sends from `peer` with the same tag in the order they were
// posted (MPI's non-overtaking rule), and the receiver always knows the exact byte count.
// Nothing here blocks: test() polls, and waiting with a deadline is done by the caller
// (comm/op_context.hpp), so every wait in comm/ can time out.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ftcc::comm {

class Transport {
 public:
  using Handle = std::uint32_t;

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Largest tag value the transport accepts (MPI_TAG_UB for MPI).
  virtual int tag_upper_bound() const = 0;

  // Start a send/receive of `bytes` bytes. `op` names the operation in error messages.
  virtual Handle isend(const void* buf, std::size_t bytes, int peer, int tag, const char* op) = 0;
  virtual Handle irecv(void* buf, std::size_t bytes, int peer, int tag, const char* op) = 0;
  // True when the request completed (the handle is then released). Throws ProcessFailed,
  // Revoked or CommError when it completed with an error (the handle is released too).
  virtual bool test(Handle h, const char* op) = 0;
  // Give up on an incomplete request: cancel a receive if possible and release the handle.
  // Returns false when the transport cannot promise that the buffer is no longer accessed
  // (the caller should then not reuse scratch memory; see Scratch::poison).
  virtual bool abandon(Handle h) noexcept = 0;

  // True once the communicator was revoked (ULFM). Checked by idle waits as a backstop: a revoke
  // should fail every pending request, but a send stuck in a rendezvous handshake was seen to
  // stay pending (Open MPI 5.0.11, ob1), which would turn a revoke into a Timeout.
  virtual bool revoked() const { return false; }

  // A second endpoint for the same rank, for an operation that runs concurrently on another thread.
  virtual std::unique_ptr<Transport> clone() const = 0;
  // The underlying MPI communicator, or MPI_COMM_NULL for a transport that is not MPI.
  virtual MPI_Comm mpi_comm() const { return MPI_COMM_NULL; }
};

}  // namespace ftcc::comm
