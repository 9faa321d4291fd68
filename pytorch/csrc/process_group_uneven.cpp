// pytorch/csrc/process_group_uneven.cpp: all_gather and reduce_scatter of tensor lists whose sizes
// differ by rank (process_group_ftcc.hpp states the contract). Both are one alltoallv: the same
// call on every rank, since every rank holds the whole list of sizes.
#include <vector>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/reduce_kernels.hpp"
#include "process_group_ftcc.hpp"
#include "tensor_buffers.hpp"

namespace ftcc::torch_backend {
namespace {

// Each tensor of the list has the dtype of `like`; entry `mine` has as many elements as `like`.
void check_uneven(const std::vector<at::Tensor>& ts, const at::Tensor& like, int mine, const char* op,
                  const char* what) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    check_tensor(ts[i], op);
    TORCH_CHECK_VALUE(ts[i].scalar_type() == like.scalar_type(), "ftcc: ", op, ": ", what, "[", i, "] is ",
                      ts[i].scalar_type(), " but this rank's tensor is ", like.scalar_type());
  }
  TORCH_CHECK_VALUE(ts[static_cast<std::size_t>(mine)].numel() == like.numel(), "ftcc: ", op, ": ", what, "[", mine,
                    "] (this rank's) has ", ts[static_cast<std::size_t>(mine)].numel(),
                    " elements but this rank's tensor has ", like.numel(), "; sizes may differ by rank, but entry r "
                    "must match rank r's tensor");
}

struct Layout {
  std::vector<std::size_t> counts, displs;
  std::size_t total = 0;
};

Layout layout_of(const std::vector<at::Tensor>& ts) {
  Layout l;
  for (const auto& t : ts) {
    l.counts.push_back(static_cast<std::size_t>(t.numel()));
    l.displs.push_back(l.total);
    l.total += l.counts.back();
  }
  return l;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allgather_uneven(const std::vector<at::Tensor>& outs,
                                                                  const at::Tensor& in) {
  check_uneven(outs, in, getRank(), "allgather", "output");
  sync_current_streams({in});
  const comm::DType dt = dtype_of(in, "allgather");
  OpTask k = task("all_gather", OpClass::shared_result, true, true);
  k.result_bytes = 0;
  for (const auto& o : outs) k.result_bytes += bytes_of(o);
  k.result_dtype = in.scalar_type();
  const Layout recv = layout_of(outs);
  k.compute = [in, dt, recv](comm::Communicator& c, int) {
    at::Tensor i = host_input(in);
    // The same block to every rank: the send displacements all point at it.
    const std::vector<std::size_t> sc(static_cast<std::size_t>(c.size()), static_cast<std::size_t>(i.numel()));
    const std::vector<std::size_t> sd(static_cast<std::size_t>(c.size()), 0);
    at::Tensor all = host_empty(in, static_cast<std::int64_t>(recv.total));
    comm::alltoallv(c, i.data_ptr(), sc.data(), sd.data(), all.data_ptr(), recv.counts.data(), recv.displs.data(), dt);
    return all;
  };
  k.commit = [outs](const at::Tensor& r) { write_split(outs, r); };
  return enqueue(c10d::OpType::ALLGATHER, std::move(k), outs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::reduce_scatter_uneven(const at::Tensor& out,
                                                                       const std::vector<at::Tensor>& ins,
                                                                       const c10d::ReduceScatterOptions& opts) {
  check_tensor(out, "reduce_scatter");
  check_uneven(ins, out, getRank(), "reduce_scatter", "input");
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, out, "reduce_scatter");
  const bool avg = is_avg(opts.reduceOp);
  const double factor = premul_factor(opts.reduceOp);
  const comm::DType dt = dtype_of(out, "reduce_scatter");
  sync_current_streams(ins);
  OpTask k = task("reduce_scatter", OpClass::rank_result, true, true);
  k.result_dtype = out.scalar_type();
  const Layout send = layout_of(ins);
  k.compute = [ins, out, op, avg, factor, dt, send](comm::Communicator& c, int) {
    at::Tensor all = flat_cat(ins);
    if (factor != 1.0) all = all.mul(factor);  // the caller's inputs stay as they were
    // Every rank's block for this rank, in rank order, then reduced in that order.
    const auto n = static_cast<std::size_t>(c.size()), m = static_cast<std::size_t>(out.numel());
    std::vector<std::size_t> rc(n, m), rd(n);
    for (std::size_t p = 0; p < n; ++p) rd[p] = p * m;
    at::Tensor blocks = host_empty(out, static_cast<std::int64_t>(n * m));
    comm::alltoallv(c, all.data_ptr(), send.counts.data(), send.displs.data(), blocks.data_ptr(), rc.data(), rd.data(),
                    dt);
    at::Tensor mine = blocks.narrow(0, 0, static_cast<std::int64_t>(m)).clone();
    for (std::size_t p = 1; p < n; ++p)
      comm::reduce(mine.data_ptr(), mine.data_ptr(), blocks.narrow(0, static_cast<std::int64_t>(p * m),
                                                                   static_cast<std::int64_t>(m)).data_ptr(),
                   m, dt, op);
    if (avg) mine.div_(c.size());
    return mine;
  };
  k.commit = [out](const at::Tensor& r) { write_result(out, r); };
  return enqueue(c10d::OpType::REDUCE_SCATTER, std::move(k), {out});
}

}  // namespace ftcc::torch_backend
