#include "ftcc_work.hpp"

#include <ATen/core/jit_type.h>

#include "group_runner.hpp"

namespace ftcc::torch_backend {
namespace {

std::vector<c10::Device> devices_of(const std::vector<at::Tensor>& ts) {
  std::vector<c10::Device> ds;
  for (const auto& t : ts)
    if (t.defined() && t.device().is_cuda() && std::find(ds.begin(), ds.end(), t.device()) == ds.end())
      ds.push_back(t.device());
  return ds;
}

}  // namespace

FtccWork::FtccWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
                   std::uint64_t sequence)
    : c10d::Work(rank, type, profiling_title),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       devices_of(outputs_))),
      sequence_(sequence) {}

c10::intrusive_ptr<c10::ivalue::Future> FtccWork::getFuture() { return future_; }

bool FtccWork::wait(std::chrono::milliseconds timeout) {
  if (runner_ && !isCompleted()) runner_->help(task_);
  return c10d::Work::wait(timeout);
}

void FtccWork::complete(std::exception_ptr error, const at::Tensor& value) {
  // The Work first, then its future: whoever the future wakes sees isCompleted() true.
  if (error) {
    finish(error);
    future_->setError(error);
  } else {
    if (value.defined()) outputs_ = {value};
    finish();
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace ftcc::torch_backend
