#include "process_group_ftcc.hpp"

#include <c10/util/Exception.h>

#include <chrono>
#include <memory>
#include <sstream>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc_work.hpp"
#include "tensor_buffers.hpp"

namespace ftcc::torch_backend {
namespace {

using c10d::OpType;

// Divides by the group size after a SUM that stands for AVG (floating types only).
void finish_avg(bool avg, const at::Tensor& host, int size) {
  if (avg) host.div_(size);
}

// A poll for a point-to-point request with the communicator's deadline. Like P2PRequest::wait it
// also checks for a revoked communicator now and then: a send stuck in its rendezvous stays
// pending after a revoke (comm/transport.hpp, revoked()).
Runtime::Poll poll_request(comm::Communicator& c, comm::P2PRequest req, const char* op, int peer) {
  auto r = std::make_shared<comm::P2PRequest>(std::move(req));
  const double timeout_s = c.timeout_s();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto polls = std::make_shared<unsigned>(0);
  comm::Transport* transport = &c.transport();
  return [r, deadline, timeout_s, op, peer, polls, transport]() -> bool {
    if (r->test()) return true;
    if (++*polls % 64 == 0 && transport->revoked()) throw comm::Revoked(op, 0);
    if (std::chrono::steady_clock::now() > deadline) throw comm::Timeout(op, {peer}, timeout_s);
    return false;
  };
}

}  // namespace

ProcessGroupFtcc::ProcessGroupFtcc(Runtime& runtime, int generation)
    : c10d::Backend(runtime.info(generation).rank, runtime.info(generation).size()),
      rt_(runtime),
      generation_(generation) {}

c10::intrusive_ptr<c10d::Backend> ProcessGroupFtcc::create(int rank, int size, double timeout_s) {
  Runtime& rt = Runtime::start(timeout_s);
  const int g = rt.generation();
  const GenerationInfo info = rt.info(g);
  TORCH_CHECK_VALUE(size == info.size(), "ftcc: a process group of ", size, " ranks was asked for, but the ftcc group has ",
                    info.size(), " (", g == 0 ? "the MPI job's processes" : "the survivors",
                    "): ftcc backs the whole job only; sub-groups (dist.new_group of some ranks) are not supported");
  TORCH_CHECK_VALUE(rank == info.rank, "ftcc: this process was given rank ", rank, " but it is rank ", info.rank,
                    " of the ftcc group: let the MPI launch number the ranks (tools/ftcc-run sets RANK; do not "
                    "override it)");
  return c10::make_intrusive<ProcessGroupFtcc>(rt, g);
}

std::vector<std::int64_t> ProcessGroupFtcc::failedRanks() const {
  auto f = rt_.failure(generation_);
  return f ? f->failed : std::vector<std::int64_t>{};
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::enqueue(OpType type, const char* name, std::vector<at::Tensor> outputs,
                                                         Body body) {
  sync_current_streams(outputs);  // (the ops sync their inputs themselves first)
  auto work = c10::make_intrusive<FtccWork>(getRank(), type, name, std::move(outputs), ++sequence_);
  const std::uint64_t id = rt_.submit(generation_, name, std::move(body), [work](std::exception_ptr e) { work->complete(e); });
  work->set_task(&rt_, id);
  return work;
}

void ProcessGroupFtcc::check_root(int root, const char* op) const {
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), "ftcc: ", op, ": root rank ", root, " is not a rank of this group of ",
                    getSize());
}

void ProcessGroupFtcc::check_peer(int peer, int tag, const char* op) const {
  TORCH_CHECK_VALUE(peer >= 0 && peer < getSize() && peer != getRank(), "ftcc: ", op, ": peer rank ", peer,
                    " is not another rank of this group of ", getSize());
  TORCH_CHECK_VALUE(tag >= 0 && tag < comm::Communicator::kMaxUserTag, "ftcc: ", op, ": tag ", tag, " is outside [0, ",
                    comm::Communicator::kMaxUserTag, ")");
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupFtcc::shrink(const std::vector<int64_t>& ranks_to_exclude, int,
                                                           const c10::intrusive_ptr<Options>&) {
  auto f = rt_.failure(generation_);
  if (!f) {
    // No failure known here yet: a barrier of this group finds one if a member is gone.
    auto w = barrier(c10d::BarrierOptions{});
    try {
      w->wait();
    } catch (...) {
    }
    f = rt_.failure(generation_);
    TORCH_CHECK_VALUE(f.has_value(), "ftcc: shrink_group(", rank_list(std::vector<std::int64_t>(ranks_to_exclude.begin(), ranks_to_exclude.end())), "): no rank of this group failed (a barrier of all ",
                      getSize(), " ranks completed); ftcc shrinks a group only by the ranks that failed");
  }
  TORCH_CHECK(!f->fatal, "ftcc: shrink_group: the group cannot go on: ", f->message);
  std::vector<std::int64_t> asked(ranks_to_exclude.begin(), ranks_to_exclude.end());
  std::sort(asked.begin(), asked.end());
  TORCH_CHECK_VALUE(asked == f->failed, "ftcc: shrink_group(", rank_list(asked), "): the survivors agreed that ranks ",
                    rank_list(f->failed), " failed; pass exactly those (RankFailure.failed_ranks)");
  return c10::make_intrusive<ProcessGroupFtcc>(rt_, f->next_generation);
}

// ---- collectives -------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  check_single(tensors, "broadcast");
  check_root(static_cast<int>(opts.rootRank), "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor t = tensors[0];
  return enqueue(OpType::BROADCAST, "ftcc:broadcast", {t}, [t, root](comm::Communicator& c) -> Runtime::Poll {
    HostBuffer b(t, c.rank() == root);
    comm::broadcast(c, b.data(), b.count(), dtype_of(t, "broadcast"), root);
    b.copy_back();
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  check_single(tensors, "allreduce");
  at::Tensor t = tensors[0];
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, t, "allreduce");
  const bool avg = is_avg(opts.reduceOp);
  const double factor = premul_factor(opts.reduceOp);
  return enqueue(OpType::ALLREDUCE, "ftcc:all_reduce", {t}, [t, op, avg, factor](comm::Communicator& c) -> Runtime::Poll {
    HostBuffer b(t);
    if (factor != 1.0) b.host.mul_(factor);  // PREMUL_SUM (the input's copy is the output: in place is fine)
    comm::allreduce(c, comm::kInPlace, b.data(), b.count(), dtype_of(t, "allreduce"), op);
    finish_avg(avg, b.host, c.size());
    b.copy_back();
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "ftcc: allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    TORCH_CHECK_VALUE(t.scalar_type() == tensors[0].scalar_type(), "ftcc: allreduce_coalesced: tensors of dtypes ",
                      tensors[0].scalar_type(), " and ", t.scalar_type(), " in one call; coalesce one dtype at a time");
  }
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, tensors[0], "allreduce_coalesced");
  TORCH_CHECK_VALUE(opts.reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM,
                    "ftcc: allreduce_coalesced: PREMUL_SUM is supported by all_reduce and reduce_scatter only");
  const bool avg = is_avg(opts.reduceOp);
  std::vector<at::Tensor> ts = tensors;
  return enqueue(OpType::ALLREDUCE_COALESCED, "ftcc:all_reduce_coalesced", ts,
                 [ts, op, avg](comm::Communicator& c) -> Runtime::Poll {
                   // One flat host buffer for all of them: one collective instead of one per tensor.
                   std::vector<at::Tensor> flat;
                   for (const auto& t : ts) flat.push_back(t.reshape({-1}).to(at::kCPU));
                   at::Tensor all = at::cat(flat);
                   comm::allreduce(c, comm::kInPlace, all.data_ptr(), static_cast<std::size_t>(all.numel()),
                                   dtype_of(ts[0], "allreduce_coalesced"), op);
                   finish_avg(avg, all, c.size());
                   std::int64_t at = 0;
                   for (const auto& t : ts) {
                     t.copy_(all.narrow(0, at, t.numel()).view(t.sizes()));
                     at += t.numel();
                   }
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_single(tensors, "reduce");
  check_root(static_cast<int>(opts.rootRank), "reduce");
  at::Tensor t = tensors[0];
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, t, "reduce");
  TORCH_CHECK_VALUE(opts.reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM,
                    "ftcc: reduce: PREMUL_SUM is supported by all_reduce and reduce_scatter only");
  const bool avg = is_avg(opts.reduceOp);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpType::REDUCE, "ftcc:reduce", {t}, [t, op, avg, root](comm::Communicator& c) -> Runtime::Poll {
    HostBuffer b(t);
    const comm::DType dt = dtype_of(t, "reduce");
    if (c.rank() == root) {
      comm::reduce(c, comm::kInPlace, b.data(), b.count(), dt, op, root);
      finish_avg(avg, b.host, c.size());
      b.copy_back();
    } else {
      comm::reduce(c, b.data(), nullptr, b.count(), dt, op, root);
    }
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions&) {
  check_single(inputs, "allgather");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                    "ftcc: allgather: expected one output list of ", getSize(), " tensors");
  at::Tensor in = inputs[0];
  check_same(outputs[0], in, "allgather", "output");
  std::vector<at::Tensor> outs = outputs[0];
  sync_current_streams({in});
  return enqueue(OpType::ALLGATHER, "ftcc:all_gather", outs, [in, outs](comm::Communicator& c) -> Runtime::Poll {
    HostBuffer b(in);
    at::Tensor all = at::empty({c.size() * in.numel()}, in.options().device(at::kCPU));
    comm::allgather(c, b.data(), all.data_ptr(), b.count(), dtype_of(in, "allgather"));
    for (int r = 0; r < c.size(); ++r) outs[r].copy_(all.narrow(0, r * in.numel(), in.numel()).view(outs[r].sizes()));
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  check_tensor(input, "all_gather_into_tensor");
  check_tensor(output, "all_gather_into_tensor");
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "ftcc: all_gather_into_tensor: output is ",
                    output.scalar_type(), " but the input is ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "ftcc: all_gather_into_tensor: output has ",
                    output.numel(), " elements; expected ", getSize(), " x ", input.numel());
  at::Tensor in = input, out = output;
  sync_current_streams({in});
  return enqueue(OpType::_ALLGATHER_BASE, "ftcc:all_gather_into_tensor", {out},
                 [in, out](comm::Communicator& c) -> Runtime::Poll {
                   HostBuffer i(in), o(out, false);
                   comm::allgather(c, i.data(), o.data(), i.count(), dtype_of(in, "all_gather_into_tensor"));
                   o.copy_back();
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions&) {
  // torch's layout (as gloo's): outputs[r][k] receives rank r's inputs[k].
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize(), "ftcc: allgather_coalesced: ", outputs.size(),
                    " output lists; expected one per rank (", getSize(), ")");
  std::vector<at::Tensor> all_outs;
  for (int r = 0; r < getSize(); ++r) {
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "ftcc: allgather_coalesced: output list ", r, " has ",
                      outputs[r].size(), " tensors; expected one per input (", inputs.size(), ")");
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      check_tensor(inputs[k], "allgather_coalesced");
      check_same({outputs[r][k]}, inputs[k], "allgather_coalesced", "output");
    }
    all_outs.insert(all_outs.end(), outputs[r].begin(), outputs[r].end());
  }
  auto outs = outputs;
  auto ins = inputs;
  sync_current_streams(ins);
  return enqueue(OpType::ALLGATHER_COALESCED, "ftcc:all_gather_coalesced", all_outs,
                 [ins, outs](comm::Communicator& c) -> Runtime::Poll {
                   for (std::size_t k = 0; k < ins.size(); ++k) {
                     HostBuffer b(ins[k]);
                     at::Tensor all = at::empty({c.size() * ins[k].numel()}, ins[k].options().device(at::kCPU));
                     comm::allgather(c, b.data(), all.data_ptr(), b.count(), dtype_of(ins[k], "allgather_coalesced"));
                     for (int r = 0; r < c.size(); ++r)
                       outs[r][k].copy_(all.narrow(0, r * ins[k].numel(), ins[k].numel()).view(outs[r][k].sizes()));
                   }
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions&) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ftcc: allgather_into_tensor_coalesced: ", inputs.size(),
                    " inputs but ", outputs.size(), " outputs");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    check_tensor(inputs[k], "allgather_into_tensor_coalesced");
    check_tensor(outputs[k], "allgather_into_tensor_coalesced");
    TORCH_CHECK_VALUE(outputs[k].scalar_type() == inputs[k].scalar_type() &&
                          outputs[k].numel() == inputs[k].numel() * getSize(),
                      "ftcc: allgather_into_tensor_coalesced: output ", k, " must be ", getSize(),
                      " x input ", k, " of the same dtype");
  }
  auto outs = outputs;
  auto ins = inputs;
  sync_current_streams(ins);
  return enqueue(OpType::COALESCED, "ftcc:all_gather_into_tensor_coalesced", outs,
                 [ins, outs](comm::Communicator& c) -> Runtime::Poll {
                   for (std::size_t k = 0; k < ins.size(); ++k) {
                     HostBuffer i(ins[k]), o(outs[k], false);
                     comm::allgather(c, i.data(), o.data(), i.count(), dtype_of(ins[k], "allgather"));
                     o.copy_back();
                   }
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  check_single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, "gather");
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "ftcc: gather: the root needs one output list of ", getSize(), " tensors");
    check_same(outputs[0], in, "gather", "output");
    outs = outputs[0];
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "ftcc: gather: only the root (rank ", root,
                      ") takes output tensors");
  }
  sync_current_streams({in});
  return enqueue(OpType::GATHER, "ftcc:gather", outs, [in, outs, root](comm::Communicator& c) -> Runtime::Poll {
    HostBuffer b(in);
    if (c.rank() != root) {
      comm::gather(c, b.data(), nullptr, b.count(), dtype_of(in, "gather"), root);
      return nullptr;
    }
    at::Tensor all = at::empty({c.size() * in.numel()}, in.options().device(at::kCPU));
    comm::gather(c, b.data(), all.data_ptr(), b.count(), dtype_of(in, "gather"), root);
    for (int r = 0; r < c.size(); ++r) outs[r].copy_(all.narrow(0, r * in.numel(), in.numel()).view(outs[r].sizes()));
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::GatherOptions& opts) {
  check_tensor(input, "gather_into_tensor");
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, "gather_into_tensor");
  if (getRank() == root) {
    check_tensor(output, "gather_into_tensor");
    TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * getSize(),
                      "ftcc: gather_into_tensor: the root's output must be ", getSize(), " x the input, of its dtype");
  }
  at::Tensor in = input, out = output;
  sync_current_streams({in});
  std::vector<at::Tensor> outs;
  if (getRank() == root) outs.push_back(out);
  return enqueue(OpType::GATHER, "ftcc:gather_into_tensor", outs, [in, out, root](comm::Communicator& c) -> Runtime::Poll {
    HostBuffer i(in);
    if (c.rank() != root) {
      comm::gather(c, i.data(), nullptr, i.count(), dtype_of(in, "gather_into_tensor"), root);
      return nullptr;
    }
    HostBuffer o(out, false);
    comm::gather(c, i.data(), o.data(), i.count(), dtype_of(in, "gather_into_tensor"), root);
    o.copy_back();
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  check_single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, "scatter");
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "ftcc: scatter: the root needs one input list of ", getSize(), " tensors");
    check_same(inputs[0], out, "scatter", "input");
    ins = inputs[0];
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "ftcc: scatter: only the root (rank ", root,
                      ") takes input tensors");
  }
  sync_current_streams(ins);
  return enqueue(OpType::SCATTER, "ftcc:scatter", {out}, [ins, out, root](comm::Communicator& c) -> Runtime::Poll {
    HostBuffer o(out, false);
    at::Tensor all;
    if (c.rank() == root) {
      std::vector<at::Tensor> flat;
      for (const auto& t : ins) flat.push_back(t.reshape({-1}).to(at::kCPU));
      all = at::cat(flat);
    }
    comm::scatter(c, all.defined() ? all.data_ptr() : nullptr, o.data(), o.count(), dtype_of(out, "scatter"), root);
    o.copy_back();
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  at::Tensor out = outputs[0];
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "ftcc: reduce_scatter: expected one input list of ", getSize(), " tensors");
  check_same(inputs[0], out, "reduce_scatter", "input");
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, out, "reduce_scatter");
  const bool avg = is_avg(opts.reduceOp);
  std::vector<at::Tensor> ins = inputs[0];
  sync_current_streams(ins);
  return enqueue(OpType::REDUCE_SCATTER, "ftcc:reduce_scatter", {out},
                 [ins, out, op, avg, factor = premul_factor(opts.reduceOp)](comm::Communicator& c) -> Runtime::Poll {
                   std::vector<at::Tensor> flat;
                   for (const auto& t : ins) flat.push_back(t.reshape({-1}).to(at::kCPU));
                   at::Tensor all = at::cat(flat);
                   if (factor != 1.0) all.mul_(factor);
                   HostBuffer o(out, false);
                   comm::reduce_scatter(c, all.data_ptr(), o.data(), o.count(), dtype_of(out, "reduce_scatter"), op);
                   finish_avg(avg, o.host, c.size());
                   o.copy_back();
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "reduce_scatter_tensor");
  check_tensor(output, "reduce_scatter_tensor");
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "ftcc: reduce_scatter_tensor: output is ",
                    output.scalar_type(), " but the input is ", input.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), "ftcc: reduce_scatter_tensor: input has ",
                    input.numel(), " elements; expected ", getSize(), " x ", output.numel());
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, output, "reduce_scatter_tensor");
  const bool avg = is_avg(opts.reduceOp);
  at::Tensor in = input, out = output;
  sync_current_streams({in});
  return enqueue(OpType::_REDUCE_SCATTER_BASE, "ftcc:reduce_scatter_tensor", {out},
                 [in, out, op, avg, factor = premul_factor(opts.reduceOp)](comm::Communicator& c) -> Runtime::Poll {
                   HostBuffer i(in), o(out, false);
                   at::Tensor src = factor != 1.0 ? i.host.mul(factor) : i.host;  // the caller's input stays as it was
                   comm::reduce_scatter(c, src.data_ptr(), o.data(), o.count(), dtype_of(out, "reduce_scatter_tensor"), op);
                   finish_avg(avg, o.host, c.size());
                   o.copy_back();
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size() && !inputs.empty(), "ftcc: reduce_scatter_tensor_coalesced: ",
                    inputs.size(), " inputs but ", outputs.size(), " outputs");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    check_tensor(inputs[k], "reduce_scatter_tensor_coalesced");
    check_tensor(outputs[k], "reduce_scatter_tensor_coalesced");
    TORCH_CHECK_VALUE(outputs[k].scalar_type() == inputs[k].scalar_type() &&
                          inputs[k].numel() == outputs[k].numel() * getSize(),
                      "ftcc: reduce_scatter_tensor_coalesced: input ", k, " must be ", getSize(), " x output ", k,
                      " of the same dtype");
  }
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, outputs[0], "reduce_scatter_tensor_coalesced");
  const bool avg = is_avg(opts.reduceOp);
  auto outs = outputs;
  auto ins = inputs;
  sync_current_streams(ins);
  return enqueue(OpType::COALESCED, "ftcc:reduce_scatter_tensor_coalesced", outs,
                 [ins, outs, op, avg, factor = premul_factor(opts.reduceOp)](comm::Communicator& c) -> Runtime::Poll {
                   for (std::size_t k = 0; k < ins.size(); ++k) {
                     HostBuffer i(ins[k]), o(outs[k], false);
                     at::Tensor src = factor != 1.0 ? i.host.mul(factor) : i.host;
                     comm::reduce_scatter(c, src.data_ptr(), o.data(), o.count(), dtype_of(outs[k], "reduce_scatter"), op);
                     finish_avg(avg, o.host, c.size());
                     o.copy_back();
                   }
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions&) {
  check_tensor(input, "all_to_all_single");
  check_tensor(output, "all_to_all_single");
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "ftcc: all_to_all_single: output is ",
                    output.scalar_type(), " but the input is ", input.scalar_type());
  const int n = getSize();
  // Splits are rows of dim 0; none given: equal parts.
  auto counts = [n](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const std::int64_t row = rows == 0 ? 0 : t.numel() / rows;
    std::vector<std::size_t> c(static_cast<std::size_t>(n)), d(static_cast<std::size_t>(n));
    if (splits.empty()) {
      TORCH_CHECK_VALUE(rows % n == 0, "ftcc: all_to_all_single: ", which, " has ", rows,
                        " rows, not a multiple of the group size ", n, "; pass split sizes");
      for (int p = 0; p < n; ++p) c[p] = static_cast<std::size_t>(rows / n * row);
    } else {
      TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == n, "ftcc: all_to_all_single: ", splits.size(), " ", which,
                        " split sizes for a group of ", n);
      std::int64_t sum = 0;
      for (int p = 0; p < n; ++p) {
        TORCH_CHECK_VALUE(splits[p] >= 0, "ftcc: all_to_all_single: negative ", which, " split size");
        c[p] = static_cast<std::size_t>(splits[p] * row);
        sum += splits[p];
      }
      TORCH_CHECK_VALUE(sum == rows, "ftcc: all_to_all_single: ", which, " split sizes add up to ", sum, " but it has ",
                        rows, " rows");
    }
    std::size_t at = 0;
    for (int p = 0; p < n; ++p) d[p] = at, at += c[p];
    return std::make_pair(c, d);
  };
  auto [sc, sd] = counts(input, input_splits, "input");
  auto [rc, rd] = counts(output, output_splits, "output");
  at::Tensor in = input, out = output;
  sync_current_streams({in});
  return enqueue(OpType::ALLTOALL_BASE, "ftcc:all_to_all_single", {out},
                 [in, out, sc = sc, sd = sd, rc = rc, rd = rd](comm::Communicator& c) -> Runtime::Poll {
                   HostBuffer i(in), o(out, false);
                   comm::alltoallv(c, i.data(), sc.data(), sd.data(), o.data(), rc.data(), rd.data(),
                                   dtype_of(in, "all_to_all_single"));
                   o.copy_back();
                   return nullptr;
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == n && static_cast<int>(outputs.size()) == n,
                    "ftcc: all_to_all: expected ", n, " input and ", n, " output tensors, got ", inputs.size(), " and ",
                    outputs.size());
  for (int p = 0; p < n; ++p) {
    check_tensor(inputs[p], "all_to_all");
    check_tensor(outputs[p], "all_to_all");
    TORCH_CHECK_VALUE(inputs[p].scalar_type() == inputs[0].scalar_type() &&
                          outputs[p].scalar_type() == inputs[0].scalar_type(),
                      "ftcc: all_to_all: every tensor must have the dtype ", inputs[0].scalar_type());
  }
  auto ins = inputs;
  auto outs = outputs;
  sync_current_streams(ins);
  return enqueue(OpType::ALLTOALL, "ftcc:all_to_all", outs, [ins, outs, n](comm::Communicator& c) -> Runtime::Poll {
    std::vector<at::Tensor> flat;
    std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
    std::size_t s = 0, r = 0;
    for (int p = 0; p < n; ++p) {
      flat.push_back(ins[p].reshape({-1}).to(at::kCPU));
      sc[p] = static_cast<std::size_t>(ins[p].numel()), sd[p] = s, s += sc[p];
      rc[p] = static_cast<std::size_t>(outs[p].numel()), rd[p] = r, r += rc[p];
    }
    at::Tensor send = at::cat(flat);
    at::Tensor recv = at::empty({static_cast<std::int64_t>(r)}, send.options());
    comm::alltoallv(c, send.data_ptr(), sc.data(), sd.data(), recv.data_ptr(), rc.data(), rd.data(),
                    dtype_of(ins[0], "all_to_all"));
    for (int p = 0; p < n; ++p)
      outs[p].copy_(recv.narrow(0, static_cast<std::int64_t>(rd[p]), static_cast<std::int64_t>(rc[p])).view(outs[p].sizes()));
    return nullptr;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::barrier(const c10d::BarrierOptions&) {
  return enqueue(OpType::BARRIER, "ftcc:barrier", {}, [](comm::Communicator& c) -> Runtime::Poll {
    comm::barrier(c);
    return nullptr;
  });
}

// ---- point-to-point ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_single(tensors, "send");
  check_peer(dst, tag, "send");
  at::Tensor t = tensors[0];
  return enqueue(OpType::SEND, "ftcc:send", {t}, [t, dst, tag](comm::Communicator& c) -> Runtime::Poll {
    auto b = std::make_shared<HostBuffer>(t);
    auto req = c.isend(b->data(), b->count(), dtype_of(t, "send"), dst, tag);
    auto poll = poll_request(c, std::move(req), "send", dst);
    return [b, poll] { return poll(); };  // b keeps the staged copy alive until the send completes
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_single(tensors, "recv");
  check_peer(src, tag, "recv");
  at::Tensor t = tensors[0];
  return enqueue(OpType::RECV, "ftcc:recv", {t}, [t, src, tag](comm::Communicator& c) -> Runtime::Poll {
    auto b = std::make_shared<HostBuffer>(t, false);
    auto req = c.irecv(b->data(), b->count(), dtype_of(t, "recv"), src, tag);
    auto poll = poll_request(c, std::move(req), "recv", src);
    return [b, poll] {
      if (!poll()) return false;
      b->copy_back();
      return true;
    };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK_VALUE(false, "ftcc: recv from any source is not supported; name the source rank (dist.recv(t, src=...))");
}

}  // namespace ftcc::torch_backend
