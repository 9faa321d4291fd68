#include "ddp_mean_hook.hpp"

namespace ftcc::torch_backend {

c10::intrusive_ptr<c10::ivalue::Future> DdpMeanHook::runHook(c10d::GradBucket& bucket) {
  if (delegate_) return delegate_->runHook(bucket);
  if (bucket.getIndex() == 0) ++step_;
  auto work = backend_->ddp_mean(bucket.getBufferRef(), step_, static_cast<int>(bucket.getIndex()), bucket.isLast());
  return work->getFuture();
}

at::Tensor DdpMeanHook::parseHookResult(const c10::IValue& result) {
  if (delegate_) return delegate_->parseHookResult(result);
  return result.toTensorVector().at(0);
}

}  // namespace ftcc::torch_backend
