// pytorch/csrc/ftcc_work.hpp: the c10d::Work of one ftcc operation.
//
// Created when torch calls the backend, completed by the group's runner (complete()). wait()
// blocks until then (running the operation on the waiting thread if it has not started:
// GroupRunner::help) and rethrows the operation's error (an ftcc_torch.RankFailure when a member
// died and the call could not be completed: rank_failure.hpp); getFuture() is completed at the
// same moment with the output tensors (or the result tensor, for DDP's hook), so DDP's reducer
// and communication hooks chain on it. isCompleted() never blocks.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <vector>

namespace ftcc::torch_backend {

class GroupRunner;

class FtccWork : public c10d::Work {
 public:
  FtccWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
           std::uint64_t sequence);
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  std::uint64_t getSequencenumber() const override { return sequence_; }
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // The task that completes this work (set once, right after it is submitted).
  void set_task(GroupRunner* runner, std::uint64_t id) {
    runner_ = runner;
    task_ = id;
  }
  // The runner's end of the operation: nullptr on success; `value`, when defined, replaces the
  // outputs as the future's value.
  void complete(std::exception_ptr error, const at::Tensor& value);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::uint64_t sequence_;
  GroupRunner* runner_ = nullptr;
  std::uint64_t task_ = 0;
};

}  // namespace ftcc::torch_backend
