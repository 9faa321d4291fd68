// comm/allreduce_async.hpp: nonblocking allreduce, so gradient buckets are reduced while the
// backward pass goes on.
//
//   auto req = allreduce_async(comm, grads, grads, n, DType::f32, ReduceOp::sum);
//   ... compute ...
//   req.wait();   // rethrows Timeout / ProcessFailed / Revoked from the operation
//
// The operation takes its tag (sequence number) when started, so all ranks must start their
// collectives on `comm` in the same order, blocking and nonblocking alike; they may complete in
// any order. It runs on the communicator's progress thread (comm/progress_thread.hpp: one per
// Communicator, operations in the order they were started) over its own clone of the transport and its own scratch, so `comm`
// stays usable meanwhile (MPI must provide MPI_THREAD_MULTIPLE; with less, the operation runs to
// completion inside allreduce_async, which is correct but does not overlap). An operation that
// waits on a dead or hung peer holds the ones started after it: its deadline bounds the wait.
// The buffers must stay valid and untouched until wait() or test() reports completion.
// The destructor of a request not waited for waits (bounded by the operation's deadline) and
// drops any error.
#pragma once

#include <cstddef>
#include <memory>

#include "ftcc/comm/collectives.hpp"

namespace ftcc::comm {

class AllreduceRequest {
 public:
  AllreduceRequest() = default;
  AllreduceRequest(AllreduceRequest&&) noexcept;
  AllreduceRequest& operator=(AllreduceRequest&&) noexcept;
  ~AllreduceRequest();

  bool valid() const { return state_ != nullptr; }
  // True once the operation finished; rethrows its error then (once).
  bool test();
  // Blocks until the operation finished (it has its own deadline); rethrows its error.
  void wait();

 private:
  friend AllreduceRequest allreduce_async(Communicator&, const void*, void*, std::size_t, DType, ReduceOp,
                                          const AllreduceOptions&);
  struct State;
  std::shared_ptr<State> state_;  // shared with the job on the progress thread until it ends
};

AllreduceRequest allreduce_async(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype,
                                 ReduceOp op, const AllreduceOptions& options = {});

}  // namespace ftcc::comm
