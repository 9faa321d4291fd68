// comm/subgroup_transport.hpp: a sub-group of a communicator's ranks as a Transport of its own,
// so that ftcc's collectives run on it (model-parallel grids: the ranks of one model replica, the
// ranks holding the same stage or shard in every replica).
//
//   Communicator row(std::make_unique<SubgroupTransport>(world.transport(), members));
//
// members: distinct ranks of the parent, in the order that gives their ranks in the sub-group;
// the parent's own rank must be one of them. Messages go over the parent's endpoint (a clone:
// the same MPI communicator), so a revoke of the parent reaches every sub-group at once. A
// ProcessFailed lists ranks of the parent (MPI reports them); a Timeout names the peer by its
// rank in the sub-group (parent_rank() translates). Tags: a Communicator uses the lower half of its transport's tag space
// (Communicator::tags_used); a sub-group's tags are mapped into the upper half, so its messages
// never match the parent's. Two sub-groups of one parent may share a pair of ranks only if they
// never have messages in flight between that pair at the same time (the rows and columns of a
// grid share no pair). Throws ftcc::Error when the members are not valid ranks of the parent.
//
// Tags::parents keeps the parent's tags instead (no mapping): for the parts of one collective of
// the parent that run among some of its ranks under that collective's tag (the hierarchical
// collectives' exchanges between one rank per host, comm/hierarchical_allreduce.cpp and
// hierarchical_collectives.cpp), and for the
// shared-memory segment's liveness receives on the parent's liveness tag.
#pragma once

#include <memory>
#include <vector>

#include "ftcc/comm/transport.hpp"

namespace ftcc::comm {

class SubgroupTransport final : public Transport {
 public:
  enum class Tags { own_range, parents };
  SubgroupTransport(const Transport& parent, std::vector<int> members, Tags tags = Tags::own_range);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int tag_upper_bound() const override { return tag_ub_; }
  Handle isend(const void* buf, std::size_t bytes, int peer, int tag, const char* op) override;
  Handle irecv(void* buf, std::size_t bytes, int peer, int tag, const char* op) override;
  bool test(Handle h, const char* op) override { return parent_->test(h, op); }
  bool abandon(Handle h) noexcept override { return parent_->abandon(h); }
  bool revoked() const override { return parent_->revoked(); }
  std::unique_ptr<Transport> clone() const override;
  MPI_Comm mpi_comm() const override { return parent_->mpi_comm(); }

  // The parent's rank of sub-group rank r.
  int parent_rank(int r) const { return members_.at(static_cast<std::size_t>(r)); }

 private:
  int to_parent(int peer) const;

  std::unique_ptr<Transport> parent_;
  std::vector<int> members_;
  Tags tags_;
  int rank_ = -1, tag_base_ = 0, tag_ub_ = 0;
};

}  // namespace ftcc::comm
