// pytorch/csrc/ftcc_work.hpp: the c10d::Work of one ftcc operation.
//
// Created when torch calls the backend, completed by the runtime's worker (complete()). wait()
// blocks until then (running the operation on the waiting thread if it has not started) and rethrows the operation's error (an ftcc_torch.RankFailure when a member
// died: rank_failure.hpp); getFuture() is completed at the same moment with the output tensors,
// so DDP's reducer and communication hooks chain on it. isCompleted() never blocks.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <vector>

namespace ftcc::torch_backend {

class Runtime;

class FtccWork : public c10d::Work {
 public:
  FtccWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
           std::uint64_t sequence);
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  std::uint64_t getSequencenumber() const override { return sequence_; }
  // Runs the operation on the waiting thread when it has not started yet (Runtime::help), then
  // waits as c10d::Work does.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // The task that completes this work (set once, right after it is submitted).
  void set_task(Runtime* runtime, std::uint64_t id) {
    runtime_ = runtime;
    task_ = id;
  }
  // The worker's end of the operation: nullptr on success.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::uint64_t sequence_;
  Runtime* runtime_ = nullptr;
  std::uint64_t task_ = 0;
};

}  // namespace ftcc::torch_backend
