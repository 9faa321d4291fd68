// pytorch/csrc/op_task.hpp: one operation of a process group, as its runner executes it.
//
// A collective is written so that it can be run again or have its result handed to it:
//   compute(comm, root)  runs the operation on the group's current communicator and returns the
//                        result as one flat host tensor (undefined when this rank gets none). It
//                        never writes the caller's tensors, so after a failure the call can run
//                        again on the survivors from the same inputs.
//   commit(result)       writes a result into the caller's tensors (the one computed here, or the
//                        one another survivor completed: recovery/inflight_reconcile.hpp).
// Point-to-point is start(comm) -> poll(), not run again (a failure while one is pending makes the
// recovery report it: RankFailure).
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>

namespace ftcc::comm {
class Communicator;
}

namespace ftcc::torch_backend {

enum class OpClass {
  shared_result,  // the same result on every rank (allreduce, allgather, broadcast, barrier)
  rank_result,    // each rank its own (reduce_scatter, reduce, gather, scatter, all_to_all)
  p2p,            // send, recv
};

struct OpTask {
  using Poll = std::function<bool()>;
  std::uint64_t id = 0;       // runtime-wide, for Runtime::help
  std::int64_t seq = -1;      // the group's collective sequence number (-1: point-to-point)
  const char* name = "";      // "all_reduce", ...
  OpClass cls = OpClass::shared_result;
  // Completing it here means every member started it: an allreduce, an allgather, a barrier, ...
  bool fully_dependent = false;
  // Its shape depends on the group's size (an allgather's output list): it cannot run again on
  // fewer ranks than it was made for.
  bool size_dependent = false;
  // A rooted collective: the root as an original (world) rank, -1 for none.
  int root_member = -1;
  int generation = 0;         // the group's generation when the call was made
  std::int64_t result_bytes = -1;  // what compute returns (to check an adopted result)
  at::ScalarType result_dtype = at::kByte;  // its dtype (an adopted result arrives as bytes)

  std::function<at::Tensor(comm::Communicator&, int root_rank)> compute;
  std::function<void(const at::Tensor&)> commit;
  std::function<Poll(comm::Communicator&, int peer_rank)> start;  // point-to-point
  int peer_member = -1;       // point-to-point: the peer as an original rank

  // The end of the call: nullptr or its error; the result (the future's value when the call
  // asked for it, DDP's hook). Runs once, on the executing thread.
  std::function<void(std::exception_ptr, const at::Tensor& result)> done;
  std::chrono::steady_clock::time_point submitted;
  // DDP's gradient buckets (pytorch/csrc/ddp_mean_hook.hpp): the backward pass (counted per
  // group) and the bucket; the elastic sampler learns from these which pass first lacked a lost rank.
  std::int64_t ddp_step = -1;
  int ddp_bucket = -1;
  bool ddp_last = false;
};

// An adopted result arrives as bytes: the call's own dtype again (a call with no result: none).
inline at::Tensor adopted_result(const OpTask& t, const at::Tensor& bytes) {
  if (!bytes.defined() || bytes.numel() == 0) return at::Tensor();
  return bytes.view(t.result_dtype);
}

}  // namespace ftcc::torch_backend
