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
  at::Tensor out = host_empty(in, in.numel());
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
  k.commit = [outs](const at::Tensor& r) { write_split_bytes(outs, r); };
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
