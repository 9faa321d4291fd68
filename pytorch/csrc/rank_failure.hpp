// pytorch/csrc/rank_failure.hpp: how a Failure (runtime.hpp) reaches Python.
//
// A failure the survivors agreed on becomes ftcc_torch.RankFailure (a subclass of
// torch.distributed.DistBackendError with the agreed `failed_ranks`), raised as that type wherever
// torch waits for the operation: Work.wait(), a future's wait(), and inside backward() when DDP's
// reducer waits for its buckets. It travels as torch's python_error (the Python exception, made
// once with the GIL), which torch's bindings restore as is. A fatal failure, or one made while the
// interpreter is finalizing, is a c10::DistBackendError with the same one-line message.
#pragma once

#include <exception>

#include "group_failure.hpp"

namespace ftcc::torch_backend {

std::exception_ptr make_failure_error(const Failure& f);

}  // namespace ftcc::torch_backend
