// pytorch/csrc/process_group_rank_result.cpp: the collectives whose result differs per rank
// (reduce, gather, scatter, reduce_scatter, all_to_all), as OpTasks the group's runner executes
// (process_group_ftcc.hpp states the contract; op_task.hpp how a task is run again or adopted).
#include "ftcc/comm/collectives.hpp"
#include "process_group_ftcc.hpp"
#include "tensor_buffers.hpp"

namespace ftcc::torch_backend {

using c10d::OpType;

namespace {

// gather and gather_into_tensor: every rank's input, in rank order, as one flat tensor on the root
// (undefined elsewhere).
at::Tensor gather_at_root(comm::Communicator& c, int root, const at::Tensor& in, comm::DType dt) {
  at::Tensor i = host_input(in);
  at::Tensor all = c.rank() == root ? host_empty(in, c.size() * in.numel()) : at::Tensor();
  comm::gather(c, i.data_ptr(), all.defined() ? all.data_ptr() : nullptr, static_cast<std::size_t>(i.numel()), dt, root);
  return all;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_single(tensors, "reduce");
  check_root(static_cast<int>(opts.rootRank), "reduce");
  at::Tensor t = tensors[0];
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, t, "reduce");
  TORCH_CHECK_VALUE(opts.reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM,
                    "ftcc: reduce: PREMUL_SUM is supported by all_reduce and reduce_scatter only");
  const bool avg = is_avg(opts.reduceOp);
  const comm::DType dt = dtype_of(t, "reduce");
  OpTask k = task("reduce", OpClass::rank_result, false, false);
  k.root_member = member_of(static_cast<int>(opts.rootRank), "reduce");
  k.result_bytes = -1;
  k.result_dtype = t.scalar_type();
  k.compute = [t, op, avg, dt](comm::Communicator& c, int root) {
    at::Tensor in = host_input(t);
    if (c.rank() != root) {
      comm::reduce(c, in.data_ptr(), nullptr, static_cast<std::size_t>(in.numel()), dt, op, root);
      return at::Tensor();
    }
    at::Tensor out = host_empty(in, in.numel());
    comm::reduce(c, in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(in.numel()), dt, op, root);
    if (avg) out.div_(c.size());
    return out;
  };
  k.commit = [t](const at::Tensor& r) {
    if (r.defined()) write_result(t, r);
  };
  return enqueue(OpType::REDUCE, std::move(k), {t});
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
    // Sizes that differ by rank would need every rank to know the root's list: all_gather takes them.
    TORCH_CHECK_VALUE(same_numel(outputs[0], in), "ftcc: gather: the root's output list has sizes that differ by "
                      "rank; gather takes equal sizes (as gloo's): use all_gather, which takes sizes that differ");
    check_same(outputs[0], in, "gather", "output");
    outs = outputs[0];
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "ftcc: gather: only the root (rank ", root,
                      ") takes output tensors");
  }
  sync_current_streams({in});
  const comm::DType dt = dtype_of(in, "gather");
  OpTask k = task("gather", OpClass::rank_result, false, true);
  k.root_member = member_of(root, "gather");
  k.result_dtype = in.scalar_type();
  k.compute = [in, dt](comm::Communicator& c, int r) { return gather_at_root(c, r, in, dt); };
  k.commit = [outs](const at::Tensor& r) {
    if (r.defined()) write_split(outs, r);
  };
  return enqueue(OpType::GATHER, std::move(k), outs);
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
  const comm::DType dt = dtype_of(in, "gather_into_tensor");
  std::vector<at::Tensor> outs;
  if (getRank() == root) outs.push_back(out);
  OpTask k = task("gather_into_tensor", OpClass::rank_result, false, true);
  k.root_member = member_of(root, "gather_into_tensor");
  k.result_dtype = in.scalar_type();
  k.compute = [in, dt](comm::Communicator& c, int r) { return gather_at_root(c, r, in, dt); };
  k.commit = [out](const at::Tensor& r) {
    if (r.defined()) write_result(out, r);
  };
  return enqueue(OpType::GATHER, std::move(k), outs);
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
  const comm::DType dt = dtype_of(out, "scatter");
  OpTask k = task("scatter", OpClass::rank_result, false, true);
  k.root_member = member_of(root, "scatter");
  k.result_dtype = out.scalar_type();
  k.compute = [ins, out, dt](comm::Communicator& c, int r) {
    at::Tensor all = c.rank() == r ? flat_cat(ins) : at::Tensor();
    at::Tensor mine = host_empty(out, out.numel());
    comm::scatter(c, all.defined() ? all.data_ptr() : nullptr, mine.data_ptr(), static_cast<std::size_t>(out.numel()), dt,
                  r);
    return mine;
  };
  k.commit = [out](const at::Tensor& r) { write_result(out, r); };
  return enqueue(OpType::SCATTER, std::move(k), {out});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  at::Tensor out = outputs[0];
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "ftcc: reduce_scatter: expected one input list of ", getSize(), " tensors");
  if (!same_numel(inputs[0], out)) return reduce_scatter_uneven(out, inputs[0], opts);
  check_same(inputs[0], out, "reduce_scatter", "input");
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, out, "reduce_scatter");
  const bool avg = is_avg(opts.reduceOp);
  const double factor = premul_factor(opts.reduceOp);
  const comm::DType dt = dtype_of(out, "reduce_scatter");
  std::vector<at::Tensor> ins = inputs[0];
  sync_current_streams(ins);
  OpTask k = task("reduce_scatter", OpClass::rank_result, true, true);
  k.result_dtype = out.scalar_type();
  k.compute = [ins, out, op, avg, factor, dt](comm::Communicator& c, int) {
    at::Tensor all = flat_cat(ins);
    if (factor != 1.0) all = all.mul(factor);
    at::Tensor mine = host_empty(out, out.numel());
    comm::reduce_scatter(c, all.data_ptr(), mine.data_ptr(), static_cast<std::size_t>(out.numel()), dt, op);
    if (avg) mine.div_(c.size());
    return mine;
  };
  k.commit = [out](const at::Tensor& r) { write_result(out, r); };
  return enqueue(OpType::REDUCE_SCATTER, std::move(k), {out});
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
  const double factor = premul_factor(opts.reduceOp);
  const comm::DType dt = dtype_of(output, "reduce_scatter_tensor");
  at::Tensor in = input, out = output;
  sync_current_streams({in});
  OpTask k = task("reduce_scatter_tensor", OpClass::rank_result, true, true);
  k.result_dtype = out.scalar_type();
  k.compute = [in, out, op, avg, factor, dt](comm::Communicator& c, int) {
    at::Tensor all = host_input(in);
    if (factor != 1.0) all = all.mul(factor);  // the caller's input stays as it was
    at::Tensor mine = host_empty(out, out.numel());
    comm::reduce_scatter(c, all.data_ptr(), mine.data_ptr(), static_cast<std::size_t>(out.numel()), dt, op);
    if (avg) mine.div_(c.size());
    return mine;
  };
  k.commit = [out](const at::Tensor& r) { write_result(out, r); };
  return enqueue(OpType::_REDUCE_SCATTER_BASE, std::move(k), {out});
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
  const double factor = premul_factor(opts.reduceOp);
  auto outs = outputs;
  auto ins = inputs;
  sync_current_streams(ins);
  OpTask k = task("reduce_scatter_tensor_coalesced", OpClass::rank_result, true, true);
  k.result_dtype = at::kByte;
  k.compute = [ins, outs, op, avg, factor](comm::Communicator& c, int) {
    std::vector<at::Tensor> parts;
    for (std::size_t j = 0; j < ins.size(); ++j) {
      at::Tensor all = host_input(ins[j]);
      if (factor != 1.0) all = all.mul(factor);
      at::Tensor mine = host_empty(outs[j], outs[j].numel());
      comm::reduce_scatter(c, all.data_ptr(), mine.data_ptr(), static_cast<std::size_t>(outs[j].numel()),
                           dtype_of(outs[j], "reduce_scatter"), op);
      if (avg) mine.div_(c.size());
      parts.push_back(mine.view(at::kByte));
    }
    return at::cat(parts);
  };
  k.commit = [outs](const at::Tensor& r) { write_split_bytes(outs, r); };
  return enqueue(OpType::COALESCED, std::move(k), outs);
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
  const comm::DType dt = dtype_of(in, "all_to_all_single");
  OpTask k = task("all_to_all_single", OpClass::rank_result, true, true);
  k.result_dtype = out.scalar_type();
  k.compute = [in, out, dt, sc = sc, sd = sd, rc = rc, rd = rd](comm::Communicator& c, int) {
    at::Tensor i = host_input(in);
    at::Tensor o = host_empty(out, out.numel());
    comm::alltoallv(c, i.data_ptr(), sc.data(), sd.data(), o.data_ptr(), rc.data(), rd.data(), dt);
    return o;
  };
  k.commit = [out](const at::Tensor& r) { write_result(out, r); };
  return enqueue(OpType::ALLTOALL_BASE, std::move(k), {out});
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
  const comm::DType dt = dtype_of(ins[0], "all_to_all");
  OpTask k = task("all_to_all", OpClass::rank_result, true, true);
  k.result_dtype = ins[0].scalar_type();
  k.compute = [ins, outs, n, dt](comm::Communicator& c, int) {
    std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
    std::size_t s = 0, r = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = static_cast<std::size_t>(ins[p].numel()), sd[p] = s, s += sc[p];
      rc[p] = static_cast<std::size_t>(outs[p].numel()), rd[p] = r, r += rc[p];
    }
    at::Tensor send = flat_cat(ins);
    at::Tensor recv = host_empty(ins[0], static_cast<std::int64_t>(r));
    comm::alltoallv(c, send.data_ptr(), sc.data(), sd.data(), recv.data_ptr(), rc.data(), rd.data(), dt);
    return recv;
  };
  k.commit = [outs](const at::Tensor& r) { write_split(outs, r); };
  return enqueue(OpType::ALLTOALL, std::move(k), outs);
}

}  // namespace ftcc::torch_backend
