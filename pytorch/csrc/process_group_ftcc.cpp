#include "process_group_ftcc.hpp"

#include <c10/util/Exception.h>
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <thread>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/base/error.hpp"
#include "ftcc_work.hpp"
#include "tensor_buffers.hpp"

namespace ftcc::torch_backend {
namespace {

using c10d::OpType;

std::atomic<std::uint64_t> g_next_task{0};

// A poll for a point-to-point request with the communicator's deadline. Like P2PRequest::wait it
// also checks for a revoked communicator now and then: a send stuck in its rendezvous stays
// pending after a revoke (comm/transport.hpp, revoked()).
OpTask::Poll poll_request(comm::Communicator& c, comm::P2PRequest req, const char* op, int peer) {
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

// A reduction into a new host tensor: PREMUL_SUM's factor first, AVG's division by the number of
// ranks that took part after (the survivors', when the call ran again after a failure).
at::Tensor reduce_into_new(comm::Communicator& c, at::Tensor in, comm::ReduceOp op, bool avg, double factor,
                           comm::DType dt) {
  if (factor != 1.0) in = in.mul(factor);
  at::Tensor out = at::empty_like(in);
  comm::allreduce(c, in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(in.numel()), dt, op);
  if (avg) out.div_(c.size());
  return out;
}

}  // namespace

ProcessGroupFtcc::ProcessGroupFtcc(std::shared_ptr<GroupRunner> runner, int generation)
    : c10d::Backend(runner->rank(), runner->size()),
      runner_(std::move(runner)),
      generation_(generation),
      base_name_(runner_->name()) {
  runner_->set_on_resize(this, [this](int rank, int size) {
    rank_ = rank;
    size_ = size;
  });
}

ProcessGroupFtcc::~ProcessGroupFtcc() { runner_->clear_on_resize(this); }

c10::intrusive_ptr<c10d::Backend> ProcessGroupFtcc::create(int rank, int size, double timeout_s,
                                                           const std::string& group_name,
                                                           const std::vector<std::int64_t>& global_ranks) {
  Runtime& rt = Runtime::start(timeout_s);
  std::shared_ptr<GroupRunner> world = rt.world();
  if (global_ranks.empty()) {
    TORCH_CHECK_VALUE(size == world->size(), "ftcc: a default process group of ", size, " ranks was asked for, but ",
                      "the job has ", world->size(), " processes: let the MPI launch size the job (tools/ftcc-run -n N "
                      "sets WORLD_SIZE; do not override it)");
    TORCH_CHECK_VALUE(rank == world->rank(), "ftcc: this process was given rank ", rank, " but it is rank ",
                      world->rank(), " of the job: let the MPI launch number the ranks (tools/ftcc-run sets RANK; do "
                      "not override it)");
    return c10::make_intrusive<ProcessGroupFtcc>(world, world->generation());
  }
  // A sub-group: torch numbers its members by their rank in the default group (as it is now).
  const std::vector<int> now = world->members();
  std::vector<int> members;
  for (std::int64_t g : global_ranks) {
    TORCH_CHECK_VALUE(g >= 0 && g < static_cast<std::int64_t>(now.size()), "ftcc: new_group: rank ", g,
                      " is not a rank of the default group of ", now.size());
    members.push_back(now[static_cast<std::size_t>(g)]);
  }
  TORCH_CHECK_VALUE(static_cast<int>(members.size()) == size, "ftcc: new_group: ", members.size(),
                    " ranks named for a group of ", size);
  auto runner = rt.create_group(group_name, members);
  TORCH_CHECK_VALUE(runner->rank() == rank, "ftcc: new_group: this process is rank ", runner->rank(),
                    " of the group, torch asked for ", rank);
  return c10::make_intrusive<ProcessGroupFtcc>(runner, runner->generation());
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupFtcc::getBackendOptions() {
  Runtime* rt = Runtime::existing();
  auto o = c10::make_intrusive<Options>(
      "ftcc", std::chrono::milliseconds(static_cast<long long>((rt ? rt->timeout_s() : 1800.0) * 1000)));
  o->group_name = runner_->name();
  return o;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupFtcc::split(const c10::intrusive_ptr<c10d::Store>&,
                                                          const std::vector<int>& ranks,
                                                          const c10::intrusive_ptr<Options>& opts) {
  const std::vector<int> now = runner_->members();
  std::vector<int> members;
  for (int r : ranks) {
    TORCH_CHECK_VALUE(r >= 0 && r < static_cast<int>(now.size()), "ftcc: split_group: rank ", r,
                      " is not a rank of the group '", runner_->name(), "' of ", now.size());
    members.push_back(now[static_cast<std::size_t>(r)]);
  }
  std::string name = opts && !opts->group_name.empty() ? opts->group_name : "";
  if (name.empty()) {
    name = runner_->name() + ":split";
    for (int m : members) name += ":" + std::to_string(m);
  }
  Runtime* rt = Runtime::existing();
  TORCH_CHECK(rt, "ftcc: split_group: the backend has shut down");
  auto runner = rt->create_group(name, members);
  return c10::make_intrusive<ProcessGroupFtcc>(runner, runner->generation());
}

std::vector<std::int64_t> ProcessGroupFtcc::failedRanks() const {
  auto f = runner_->failure(generation_);
  return f && !f->fatal ? f->failed : std::vector<std::int64_t>{};
}

OpTask ProcessGroupFtcc::task(const char* name, OpClass cls, bool fully_dependent, bool size_dependent) const {
  OpTask t;
  t.id = ++g_next_task;
  t.name = name;
  t.cls = cls;
  t.fully_dependent = fully_dependent;
  t.size_dependent = size_dependent;
  t.generation = generation_;
  return t;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::enqueue(OpType type, OpTask t, std::vector<at::Tensor> outputs,
                                                         bool result_is_value) {
  TORCH_CHECK(!aborted_, "ftcc: ", t.name, ": the process group was aborted; reconfigure it "
              "(dist._reconfigure with a fresh uuid) before using it again");
  sync_current_streams(outputs);  // (the ops sync their inputs themselves first)
  auto work = c10::make_intrusive<FtccWork>(getRank(), type, t.name, std::move(outputs), ++sequence_);
  const c10::Device device = work->result().empty() ? c10::Device(at::kCPU) : work->result()[0].device();
  t.done = [work, result_is_value, device](std::exception_ptr e, const at::Tensor& result) {
    if (!result_is_value || !result.defined()) {
      work->complete(e, at::Tensor());
    } else {
      // The value on the caller's device (DDP's CUDA buckets: the host result copied over).
      at::Tensor value = result.device() == device ? result : result.to(device);
      if (!device.is_cpu()) sync_current_streams({value});
      work->complete(e, value);
    }
  };
  const std::uint64_t id = t.id;
  runner_->submit(std::move(t));
  work->set_task(runner_.get(), id);
  return work;
}

int ProcessGroupFtcc::member_of(int rank, const char* op) const {
  const auto m = runner_->members();
  TORCH_CHECK_VALUE(rank >= 0 && rank < static_cast<int>(m.size()), "ftcc: ", op, ": rank ", rank,
                    " is not a rank of this group of ", m.size());
  return m[static_cast<std::size_t>(rank)];
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
  auto f = runner_->failure(generation_);
  if (!f) {
    // No failure known here yet: a barrier of this group finds one if a member is gone.
    auto w = barrier(c10d::BarrierOptions{});
    try {
      w->wait();
    } catch (...) {
    }
    f = runner_->failure(generation_);
    TORCH_CHECK_VALUE(f.has_value(), "ftcc: shrink_group(",
                      rank_list(std::vector<std::int64_t>(ranks_to_exclude.begin(), ranks_to_exclude.end())),
                      "): no rank of this group failed that the program must handle (a barrier of all ", getSize(),
                      " ranks completed; ftcc recovers lost ranks transparently unless a call cannot be completed, "
                      "see ftcc_torch.recoveries()); ftcc shrinks a group only by the ranks that failed");
  }
  TORCH_CHECK(!f->fatal, "ftcc: shrink_group: the group cannot go on: ", f->message);
  std::vector<std::int64_t> asked(ranks_to_exclude.begin(), ranks_to_exclude.end());
  std::sort(asked.begin(), asked.end());
  TORCH_CHECK_VALUE(asked == f->failed, "ftcc: shrink_group(", rank_list(asked), "): the survivors agreed that ranks ",
                    rank_list(f->failed), " failed; pass exactly those (RankFailure.failed_ranks)");
  return c10::make_intrusive<ProcessGroupFtcc>(runner_, f->next_generation);
}

// ---- collectives whose result is the same on every rank ----------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  check_single(tensors, "allreduce");
  at::Tensor t = tensors[0];
  const comm::ReduceOp op = reduce_op_of(opts.reduceOp, t, "allreduce");
  const bool avg = is_avg(opts.reduceOp);
  const double factor = premul_factor(opts.reduceOp);
  const comm::DType dt = dtype_of(t, "allreduce");
  OpTask k = task("all_reduce", OpClass::shared_result, true, false);
  k.result_bytes = bytes_of(t);
  k.result_dtype = t.scalar_type();
  k.compute = [t, op, avg, factor, dt](comm::Communicator& c, int) {
    return reduce_into_new(c, host_input(t), op, avg, factor, dt);
  };
  k.commit = [t](const at::Tensor& r) { write_result(t, r); };
  return enqueue(OpType::ALLREDUCE, std::move(k), {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::ddp_mean(const at::Tensor& bucket, std::int64_t step, int bucket_index,
                                                          bool last) {
  check_tensor(bucket, "DDP's gradient bucket");
  TORCH_CHECK_VALUE(at::isFloatingType(bucket.scalar_type()), "ftcc: DDP's gradient bucket of ", bucket.scalar_type());
  const comm::DType dt = dtype_of(bucket, "allreduce");
  OpTask k = task("all_reduce (DDP)", OpClass::shared_result, true, false);
  k.result_bytes = bytes_of(bucket);
  k.result_dtype = bucket.scalar_type();
  k.ddp_step = step;
  k.ddp_bucket = bucket_index;
  k.ddp_last = last;
  at::Tensor in = bucket;
  k.compute = [in, dt](comm::Communicator& c, int) {
    return reduce_into_new(c, host_input(in), comm::ReduceOp::sum, true, 1.0, dt);
  };
  // No commit: DDP reads the result from the future (its bucket stays this rank's own gradient,
  // which a call run again after a failure needs).
  return enqueue(OpType::ALLREDUCE, std::move(k), {bucket}, /*result_is_value=*/true);
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
  const comm::DType dt = dtype_of(tensors[0], "allreduce_coalesced");
  std::vector<at::Tensor> ts = tensors;
  OpTask k = task("all_reduce_coalesced", OpClass::shared_result, true, false);
  k.result_bytes = 0;
  for (const auto& t : ts) k.result_bytes += bytes_of(t);
  k.result_dtype = ts[0].scalar_type();
  k.compute = [ts, op, avg, dt](comm::Communicator& c, int) {
    return reduce_into_new(c, flat_cat(ts), op, avg, 1.0, dt);  // one collective for all of them
  };
  k.commit = [ts](const at::Tensor& r) { write_split(ts, r); };
  return enqueue(OpType::ALLREDUCE_COALESCED, std::move(k), ts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  check_single(tensors, "broadcast");
  check_root(static_cast<int>(opts.rootRank), "broadcast");
  at::Tensor t = tensors[0];
  const comm::DType dt = dtype_of(t, "broadcast");
  OpTask k = task("broadcast", OpClass::shared_result, false, false);
  k.root_member = member_of(static_cast<int>(opts.rootRank), "broadcast");
  k.result_bytes = bytes_of(t);
  k.result_dtype = t.scalar_type();
  k.compute = [t, dt](comm::Communicator& c, int root) {
    // The root's result is a copy of its data as sent (the caller may change t once it returns).
    at::Tensor out = c.rank() == root ? host_input(t).clone() : host_empty(t, t.numel());
    comm::broadcast(c, out.data_ptr(), static_cast<std::size_t>(out.numel()), dt, root);
    return out;
  };
  k.commit = [t](const at::Tensor& r) { write_result(t, r); };
  return enqueue(OpType::BROADCAST, std::move(k), {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions&) {
  check_single(inputs, "allgather");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                    "ftcc: allgather: expected one output list of ", getSize(), " tensors");
  at::Tensor in = inputs[0];
  if (!same_numel(outputs[0], in)) return allgather_uneven(outputs[0], in);
  check_same(outputs[0], in, "allgather", "output");
  std::vector<at::Tensor> outs = outputs[0];
  sync_current_streams({in});
  const comm::DType dt = dtype_of(in, "allgather");
  OpTask k = task("all_gather", OpClass::shared_result, true, true);
  k.result_bytes = bytes_of(in) * getSize();
  k.result_dtype = in.scalar_type();
  k.compute = [in, dt](comm::Communicator& c, int) {
    at::Tensor i = host_input(in);
    at::Tensor all = host_empty(in, c.size() * in.numel());
    comm::allgather(c, i.data_ptr(), all.data_ptr(), static_cast<std::size_t>(i.numel()), dt);
    return all;
  };
  k.commit = [outs](const at::Tensor& r) { write_split(outs, r); };
  return enqueue(OpType::ALLGATHER, std::move(k), outs);
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
  const comm::DType dt = dtype_of(in, "all_gather_into_tensor");
  OpTask k = task("all_gather_into_tensor", OpClass::shared_result, true, true);
  k.result_bytes = bytes_of(out);
  k.result_dtype = out.scalar_type();
  k.compute = [in, dt](comm::Communicator& c, int) {
    at::Tensor i = host_input(in);
    at::Tensor all = host_empty(in, c.size() * in.numel());
    comm::allgather(c, i.data_ptr(), all.data_ptr(), static_cast<std::size_t>(i.numel()), dt);
    return all;
  };
  k.commit = [out](const at::Tensor& r) { write_result(out, r); };
  return enqueue(OpType::_ALLGATHER_BASE, std::move(k), {out});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions&) {
  // torch's layout (as gloo's): outputs[r][k] receives rank r's inputs[k].
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize(), "ftcc: allgather_coalesced: ", outputs.size(),
                    " output lists; expected one per rank (", getSize(), ")");
  TORCH_CHECK_VALUE(!inputs.empty(), "ftcc: allgather_coalesced: no inputs");
  std::vector<at::Tensor> all_outs;
  for (int r = 0; r < getSize(); ++r) {
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "ftcc: allgather_coalesced: output list ", r, " has ",
                      outputs[r].size(), " tensors; expected one per input (", inputs.size(), ")");
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      check_tensor(inputs[k], "allgather_coalesced");
      TORCH_CHECK_VALUE(inputs[k].scalar_type() == inputs[0].scalar_type(),
                        "ftcc: allgather_coalesced: inputs of one dtype per call");
      check_same({outputs[r][k]}, inputs[k], "allgather_coalesced", "output");
    }
    all_outs.insert(all_outs.end(), outputs[r].begin(), outputs[r].end());
  }
  auto outs = outputs;
  auto ins = inputs;
  sync_current_streams(ins);
  const comm::DType dt = dtype_of(ins[0], "allgather_coalesced");
  OpTask k = task("all_gather_coalesced", OpClass::shared_result, true, true);
  k.result_bytes = 0;
  for (const auto& t : all_outs) k.result_bytes += bytes_of(t);
  k.result_dtype = ins[0].scalar_type();
  // One allgather of every input concatenated: rank r's block is its inputs in order.
  k.compute = [ins, dt](comm::Communicator& c, int) {
    at::Tensor mine = flat_cat(ins);
    at::Tensor all = host_empty(ins[0], c.size() * mine.numel());
    comm::allgather(c, mine.data_ptr(), all.data_ptr(), static_cast<std::size_t>(mine.numel()), dt);
    return all;
  };
  k.commit = [outs](const at::Tensor& r) {
    std::int64_t at = 0;
    for (const auto& row : outs)
      for (const auto& o : row) {
        write_result(o, r.narrow(0, at, o.numel()));
        at += o.numel();
      }
  };
  return enqueue(OpType::ALLGATHER_COALESCED, std::move(k), all_outs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions&) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size() && !inputs.empty(), "ftcc: allgather_into_tensor_coalesced: ",
                    inputs.size(), " inputs but ", outputs.size(), " outputs");
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
  OpTask k = task("all_gather_into_tensor_coalesced", OpClass::shared_result, true, true);
  k.result_bytes = 0;
  for (const auto& t : outs) k.result_bytes += bytes_of(t);
  k.result_dtype = at::kByte;
  // Each input gathered on its own (they may differ in dtype); the result is their bytes in order.
  k.compute = [ins](comm::Communicator& c, int) {
    std::vector<at::Tensor> parts;
    for (const auto& in : ins) {
      at::Tensor i = host_input(in);
      at::Tensor all = host_empty(in, c.size() * in.numel());
      comm::allgather(c, i.data_ptr(), all.data_ptr(), static_cast<std::size_t>(i.numel()), dtype_of(in, "allgather"));
      parts.push_back(all.view(at::kByte));
    }
    return at::cat(parts);
  };
  k.commit = [outs](const at::Tensor& r) {
    std::int64_t at = 0;
    for (const auto& o : outs) {
      write_result(o, r.narrow(0, at, bytes_of(o)).view(o.scalar_type()));
      at += bytes_of(o);
    }
  };
  return enqueue(OpType::COALESCED, std::move(k), outs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::barrier(const c10d::BarrierOptions&) {
  OpTask k = task("barrier", OpClass::shared_result, true, false);
  k.result_bytes = 0;
  k.compute = [](comm::Communicator& c, int) {
    comm::barrier(c);
    return at::Tensor();
  };
  return enqueue(OpType::BARRIER, std::move(k), {});
}

// ---- collectives whose result differs per rank --------------------------------------------------

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
    at::Tensor out = at::empty_like(in);
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
  k.compute = [in, dt](comm::Communicator& c, int r) {
    at::Tensor i = host_input(in);
    if (c.rank() != r) {
      comm::gather(c, i.data_ptr(), nullptr, static_cast<std::size_t>(i.numel()), dt, r);
      return at::Tensor();
    }
    at::Tensor all = host_empty(in, c.size() * in.numel());
    comm::gather(c, i.data_ptr(), all.data_ptr(), static_cast<std::size_t>(i.numel()), dt, r);
    return all;
  };
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
  k.compute = [in, dt](comm::Communicator& c, int r) {
    at::Tensor i = host_input(in);
    if (c.rank() != r) {
      comm::gather(c, i.data_ptr(), nullptr, static_cast<std::size_t>(i.numel()), dt, r);
      return at::Tensor();
    }
    at::Tensor all = host_empty(in, c.size() * in.numel());
    comm::gather(c, i.data_ptr(), all.data_ptr(), static_cast<std::size_t>(i.numel()), dt, r);
    return all;
  };
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
  k.commit = [outs](const at::Tensor& r) {
    std::int64_t at = 0;
    for (const auto& o : outs) {
      write_result(o, r.narrow(0, at, bytes_of(o)).view(o.scalar_type()));
      at += bytes_of(o);
    }
  };
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

// ---- point-to-point ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_single(tensors, "send");
  check_peer(dst, tag, "send");
  at::Tensor t = tensors[0];
  const comm::DType dt = dtype_of(t, "send");
  OpTask k = task("send", OpClass::p2p, false, false);
  k.peer_member = member_of(dst, "send");
  k.start = [t, tag, dt](comm::Communicator& c, int peer) -> OpTask::Poll {
    auto b = std::make_shared<at::Tensor>(host_input(t));
    auto req = c.isend(b->data_ptr(), static_cast<std::size_t>(b->numel()), dt, peer, tag);
    auto poll = poll_request(c, std::move(req), "send", peer);
    return [b, poll] { return poll(); };  // b keeps the staged copy alive until the send completes
  };
  return enqueue(OpType::SEND, std::move(k), {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_single(tensors, "recv");
  check_peer(src, tag, "recv");
  at::Tensor t = tensors[0];
  const comm::DType dt = dtype_of(t, "recv");
  OpTask k = task("recv", OpClass::p2p, false, false);
  k.peer_member = member_of(src, "recv");
  k.start = [t, tag, dt](comm::Communicator& c, int peer) -> OpTask::Poll {
    auto b = std::make_shared<HostBuffer>(t, false);
    auto req = c.irecv(b->data(), b->count(), dt, peer, tag);
    auto poll = poll_request(c, std::move(req), "recv", peer);
    return [b, poll] {
      if (!poll()) return false;
      b->copy_back();
      return true;
    };
  };
  return enqueue(OpType::RECV, std::move(k), {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK_VALUE(false, "ftcc: recv from any source is not supported; name the source rank (dist.recv(t, src=...))");
}

}  // namespace ftcc::torch_backend
