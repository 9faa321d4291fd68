// pytorch/csrc/ddp_mean_hook.hpp: DDP's gradient averaging on an ftcc group, as a comm hook.
//
// DDP divides each gradient by the group's size before its allreduce, fused into the copy into the
// bucket. After a rank is lost mid-step, the survivors must average over the ranks that took part
// in each bucket's reduction: all of them where some survivor completed it (its result is taken),
// the survivors where it runs again. So ftcc_torch installs this hook on every DDP over an ftcc
// group (pytorch/ftcc_torch/_ddp.py): each bucket is one ProcessGroupFtcc::ddp_mean call, the mean
// over the ranks of the reduction that produced it (the division is part of the call, so a result
// taken from another survivor is exactly the one that survivor applied), returned as a new tensor
// (the bucket keeps this rank's own gradients, which a call run again needs).
// A hook the program registers itself (register_comm_hook, a built-in one) replaces this one's
// work: the hook then delegates to it and the program's hook decides the arithmetic.
#pragma once

#include <torch/csrc/distributed/c10d/comm.hpp>

#include <cstdint>
#include <memory>

#include "process_group_ftcc.hpp"

namespace ftcc::torch_backend {

class DdpMeanHook : public c10d::CommHookInterface {
 public:
  explicit DdpMeanHook(c10::intrusive_ptr<ProcessGroupFtcc> backend) : backend_(std::move(backend)) {}
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override;
  at::Tensor parseHookResult(const c10::IValue& result) override;
  void set_delegate(std::unique_ptr<c10d::CommHookInterface> d) { delegate_ = std::move(d); }
  bool delegated() const { return delegate_ != nullptr; }

 private:
  c10::intrusive_ptr<ProcessGroupFtcc> backend_;
  std::unique_ptr<c10d::CommHookInterface> delegate_;
  std::int64_t step_ = -1;  // backward passes seen (a pass starts with bucket 0)
};

}  // namespace ftcc::torch_backend
