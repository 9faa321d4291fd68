// pytorch/csrc/process_group_ftcc.hpp: the c10d backend "ftcc".
//
// Every operation is checked on the caller's thread (one clear error for bad use: a dtype, an op,
// a shape), then queued on its group's runner (group_runner.hpp) and returned as an FtccWork; the
// runner runs it with ftcc's own collectives (comm/collectives.hpp). Tensors that are not
// contiguous host memory go through host staging.
//
// The member functions live by subject: process_group_ftcc.cpp (creation, the queue, the
// collectives whose result is the same on every rank, point-to-point), process_group_rank_result.cpp
// (reduce, gather, scatter, reduce_scatter, all_to_all), process_group_uneven.cpp,
// process_group_monitored_barrier.cpp and process_group_reconfigure.cpp.
//
// Groups: the default group (init_process_group), and any group of some of its ranks (new_group,
// split_group, a DeviceMesh's dimensions): each has its own communicator and runner, and ranks
// outside a group never wait for it.
//
// Failures (group_runner.hpp): transparent by default: the calls in flight end with one result on
// every survivor, the group's rank and size become the survivors' (dist.get_rank() and
// get_world_size() say so), and the program goes on. Where that cannot be exact, every survivor's
// calls of the old generation raise ftcc_torch.RankFailure with the same failed_ranks, and
// shrink(failed_ranks) returns the backend of the survivors (the next generation); a shrink by
// other ranks than the agreed ones, or when no rank failed, is refused with one line.
//
// torch's reconfigure contract (dist._get_reconfigure_handle, dist._reconfigure; any ftcc group,
// enable_reconfigure=True or not): a handle names this process ("ftcc:<job rank>:<pid>@<host>");
// reconfigure(uuid, handles) makes the group those processes, on them alone (disjoint groups may
// reconfigure at the same time), ranks by position in a list, by job rank in a set. Preconditions:
// every member passes the same uuid and handles, this process's handle is among them, the uuid
// was not used by this group before, and no operation of the group is in flight. Refused with one
// line otherwise. A member that died before or while the group forms fails it on every member
// with the same error (the failed set is agreed first). Calls in flight when a member of a
// reconfigured group is lost raise RankFailure (the program reconfigures again). abort() ends the
// group's calls (each queued one raises) until the next reconfigure.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "group_runner.hpp"
#include "runtime.hpp"

namespace ftcc::torch_backend {

class FtccWork;

class ProcessGroupFtcc : public c10d::Backend {
 public:
  ProcessGroupFtcc(std::shared_ptr<GroupRunner> runner, int generation);
  ~ProcessGroupFtcc() override;

  // The creator torch calls (through Backend.register_backend with extended_api): the default
  // group when global_ranks is empty, else the group of those ranks (torch calls it on members).
  static c10::intrusive_ptr<c10d::Backend> create(int rank, int size, double timeout_s, const std::string& group_name,
                                                  const std::vector<std::int64_t>& global_ranks);

  const std::string getBackendName() const override { return "ftcc"; }
  int generation() const { return generation_; }
  GroupRunner& runner() { return *runner_; }
  // The agreed failed ranks of this backend's generation, empty while none failed.
  std::vector<std::int64_t> failedRanks() const;

  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = 0,
                                           const c10::intrusive_ptr<Options>& opts_override = nullptr) override;
  // dist.split_group / DeviceMesh: the group of `ranks` (this group's numbering) as a sub-group
  // of its own (Runtime::create_group), named by torch's options. Called on the members only.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  bool supportsReconfigure() const override { return true; }
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
  void abort() override;
  // The reconfigure handles of this group's members that are alive in the job, in rank order:
  // the handle set ftcc's own agreement gives (after a failure, every survivor gets the same).
  std::vector<std::string> survivor_handles() const;

  std::uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }
  void setSequenceNumberForGroup() override {}

  // DDP's gradient bucket through ftcc's hook (ddp_mean_hook.hpp): the mean over the ranks that
  // take part (the survivors', once a rank is lost), as a new tensor in the future's value.
  c10::intrusive_ptr<c10d::Work> ddp_mean(const at::Tensor& bucket, std::int64_t step, int bucket_index, bool last);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override {
    return _allgather_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) override {
    return allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                    const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::GatherOptions& opts) override {
    return gather_into_tensor(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                       const c10d::ReduceScatterOptions& opts) override {
    return _reduce_scatter_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& output_splits,
                                                   std::vector<int64_t>& input_splits,
                                                   const c10d::AllToAllOptions& opts) override {
    return alltoall_base(output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // dist.monitored_barrier: rank 0 hears from every rank within opts.timeout, then lets them go;
  // else it raises naming every rank that did not arrive ("Ranks [2] failed to pass
  // monitoredBarrier in 2000 ms"), and the others raise when rank 0 does not confirm in time. A
  // rank that died is a failure like any other (recovered, or RankFailure).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks = false) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  // all_gather and reduce_scatter of tensor lists whose sizes differ by rank (torch allows it:
  // NCCL's allgatherv / reduce_scatter_v): every rank knows every size from its list, so all take
  // this path. One alltoallv (comm/alltoall.cpp) moves the blocks; reduce_scatter then reduces the
  // group's blocks here, in rank order (the same result on any run). process_group_uneven.cpp.
  c10::intrusive_ptr<c10d::Work> allgather_uneven(const std::vector<at::Tensor>& outs, const at::Tensor& in);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_uneven(const at::Tensor& out, const std::vector<at::Tensor>& ins,
                                                       const c10d::ReduceScatterOptions& opts);

  // A collective as the runner runs it (op_task.hpp); `outputs` are the Work's result tensors.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, OpTask t, std::vector<at::Tensor> outputs,
                                         bool result_is_value = false);
  OpTask task(const char* name, OpClass cls, bool fully_dependent, bool size_dependent) const;
  int member_of(int rank, const char* op) const;  // original rank of this group's rank
  void check_root(int root, const char* op) const;
  void check_peer(int peer, int tag, const char* op) const;

  std::shared_ptr<GroupRunner> runner_;
  int generation_;
  std::string base_name_;              // the group's name before any reconfigure
  std::set<std::int64_t> used_uuids_;  // reconfigure's uuids on this group
  bool aborted_ = false;               // abort() ran; reconfigure clears it
  std::atomic<std::uint64_t> sequence_{0};
};

}  // namespace ftcc::torch_backend
