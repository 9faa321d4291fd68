#include "ftcc/comm/allreduce_async.hpp"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <utility>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"
#include "ftcc/comm/progress_thread.hpp"

namespace ftcc::comm {

struct AllreduceRequest::State {
  std::unique_ptr<Transport> transport;
  Scratch scratch;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  // The exception changes hands whole: the job moves its only reference in here, and the waiter
  // moves it out (take_error). So the waiter holds the last reference and ends the exception's
  // life on its own thread; the job, which may drop its share of this state after the waiter has
  // read the exception, never frees it (the count of an exception's references lives in the C++
  // runtime, where ThreadSanitizer cannot see its ordering, and it reported that free as a race).
  void finish(std::exception_ptr&& e) {
    std::lock_guard<std::mutex> lock(m);
    error = std::move(e);
    done = true;
    cv.notify_all();
  }
  void await() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done; });
  }
  std::exception_ptr take_error() {
    std::lock_guard<std::mutex> lock(m);
    return std::exchange(error, nullptr);
  }
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
  // The channel for the progress thread's calls (attached here, on the caller's thread, where the
  // order of collectives is the same on every rank).
  detail::ShmSegment::Channel* ch = detail::shm_channel(comm, o.algo, 1);
  const std::size_t bytes = count * dtype_size(dtype);
  AllreduceAlgo algo = AllreduceAlgo::shm;
  if (ch && ch->hosts() == 1) {  // as the blocking allreduce: point-to-point where it measured faster
    algo = detail::one_host_auto(o.algo, bytes, comm.size());
    if (algo != AllreduceAlgo::shm) ch = nullptr;
  } else if (!ch) {
    algo = resolve_allreduce_algo(o.algo, bytes, comm.size());
  }
  AllreduceRequest req;
  req.state_ = std::make_shared<AllreduceRequest::State>();
  // The job keeps the state alive until it has finished notifying: a waiter that sees `done` may
  // drop the request (and its share) while the job is still inside notify_all.
  std::shared_ptr<AllreduceRequest::State> st = req.state_;
  st->transport = comm.transport().clone();
  // Everything rank-order dependent is fixed now, on the caller's thread.
  const int tag = comm.next_collective_tag(
      collective_key("allreduce", count, static_cast<int>(dtype), static_cast<int>(op)));
  const double timeout = comm.resolve_timeout(o.timeout_s);
  const FaultHook* hook = comm.fault_hook();
  if (!send) send = recv;
  auto body = [st, tag, timeout, hook, algo, ch, send, recv, count, dtype, op, o] {
    std::exception_ptr error;
    try {
      OpContext ctx(*st->transport, tag, timeout, ch ? detail::channel_allreduce_name(*ch) : detail::allreduce_op_name(algo),
                    hook, st->scratch);
      const std::size_t bytes = count * dtype_size(dtype);
      detail::with_host_buffers(send, bytes, recv, send != recv ? 0 : bytes, bytes, [&](const void* s, void* r) {
        if (ch)
          detail::channel_allreduce_run(ctx, *ch, s ? s : r, r, count, dtype, op, o);
        else
          detail::allreduce_run(ctx, algo, s ? s : r, r, count, dtype, op, o);
      });
    } catch (...) {
      error = std::current_exception();
    }
    st->finish(std::move(error));
  };
  if (comm.raw() == MPI_COMM_NULL || mpi_thread_multiple())
    comm.progress().post(std::move(body));
  else
    body();
  return req;
}

AllreduceRequest::AllreduceRequest(AllreduceRequest&&) noexcept = default;

AllreduceRequest& AllreduceRequest::operator=(AllreduceRequest&& o) noexcept {
  if (this != &o) {
    if (state_) state_->await();
    state_ = std::move(o.state_);
  }
  return *this;
}

AllreduceRequest::~AllreduceRequest() {
  if (state_) state_->await();
}

bool AllreduceRequest::test() {
  if (!state_) return true;
  {
    std::lock_guard<std::mutex> lock(state_->m);
    if (!state_->done) return false;
  }
  wait();
  return true;
}

void AllreduceRequest::wait() {
  if (!state_) return;
  state_->await();
  std::exception_ptr e = state_->take_error();
  state_.reset();
  if (e) std::rethrow_exception(e);
}

}  // namespace ftcc::comm
