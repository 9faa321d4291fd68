#include "ftcc/comm/allreduce_async.hpp"

#include <atomic>
#include <exception>
#include <thread>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"

namespace ftcc::comm {

struct AllreduceRequest::State {
  std::unique_ptr<Transport> transport;
  Scratch scratch;
  std::thread worker;
  std::atomic<bool> done{false};
  std::exception_ptr error;
};

namespace {

bool mpi_thread_multiple() {
  int provided = MPI_THREAD_SINGLE, initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return false;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

}  // namespace

AllreduceRequest allreduce_async(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype,
                                 ReduceOp op, const AllreduceOptions& o) {
  const AllreduceAlgo algo = resolve_allreduce_algo(o.algo, count * dtype_size(dtype), comm.size());
  AllreduceRequest req;
  req.state_ = std::make_unique<AllreduceRequest::State>();
  auto* st = req.state_.get();
  st->transport = comm.transport().clone();
  // Everything rank-order dependent is fixed now, on the caller's thread.
  const int tag = comm.next_collective_tag();
  const double timeout = comm.resolve_timeout(o.timeout_s);
  const FaultHook* hook = comm.fault_hook();
  if (!send) send = recv;
  auto body = [st, tag, timeout, hook, algo, send, recv, count, dtype, op, o] {
    try {
      OpContext ctx(*st->transport, tag, timeout, detail::allreduce_op_name(algo), hook, st->scratch);
      const std::size_t bytes = count * dtype_size(dtype);
      detail::with_host_buffers(send, bytes, recv, send != recv ? 0 : bytes, bytes, [&](const void* s, void* r) {
        detail::allreduce_run(ctx, algo, s ? s : r, r, count, dtype, op, o);
      });
    } catch (...) {
      st->error = std::current_exception();
    }
    st->done.store(true, std::memory_order_release);
  };
  if (comm.raw() == MPI_COMM_NULL || mpi_thread_multiple())
    st->worker = std::thread(body);
  else
    body();
  return req;
}

AllreduceRequest::AllreduceRequest(AllreduceRequest&&) noexcept = default;

AllreduceRequest& AllreduceRequest::operator=(AllreduceRequest&& o) noexcept {
  if (this != &o) {
    if (state_ && state_->worker.joinable()) state_->worker.join();
    state_ = std::move(o.state_);
  }
  return *this;
}

AllreduceRequest::~AllreduceRequest() {
  if (state_ && state_->worker.joinable()) state_->worker.join();
}

bool AllreduceRequest::test() {
  if (!state_) return true;
  if (!state_->done.load(std::memory_order_acquire)) return false;
  wait();
  return true;
}

void AllreduceRequest::wait() {
  if (!state_) return;
  if (state_->worker.joinable()) state_->worker.join();
  std::exception_ptr e = state_->error;
  state_.reset();
  if (e) std::rethrow_exception(e);
}

}  // namespace ftcc::comm
