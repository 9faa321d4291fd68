#include "ftcc/comm/subgroup_transport.hpp"

#include <algorithm>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"

namespace ftcc::comm {

SubgroupTransport::SubgroupTransport(const Transport& parent, std::vector<int> members, Tags tags)
    : parent_(parent.clone()), members_(std::move(members)), tags_(tags) {
  const int n = parent_->size();
  FTCC_CHECK(!members_.empty()) << "sub-group with no members";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const int m = members_[i];
    FTCC_CHECK(m >= 0 && m < n) << "sub-group member " << m << " is not a rank of the parent (size " << n << ")";
    FTCC_CHECK(std::count(members_.begin(), members_.end(), m) == 1) << "sub-group member " << m << " listed twice";
    if (m == parent_->rank()) rank_ = static_cast<int>(i);
  }
  FTCC_CHECK(rank_ >= 0) << "rank " << parent_->rank() << " of the parent is not a member of its sub-group";
  const int ub = parent_->tag_upper_bound();
  if (tags_ == Tags::parents) {
    tag_ub_ = ub;
    return;
  }
  // The parent's Communicator uses the tags below tags_used(); ours go above.
  tag_base_ = Communicator::tags_used(ub);
  tag_ub_ = ub - tag_base_;
  FTCC_CHECK(tag_ub_ >= 2 * Communicator::kMaxUserTag)
      << "the transport's tag upper bound " << ub << " leaves too few tags for a sub-group";
}

int SubgroupTransport::to_parent(int peer) const {
  FTCC_CHECK(peer >= 0 && peer < size()) << "peer " << peer << " outside the sub-group of " << size();
  return members_[static_cast<std::size_t>(peer)];
}

Transport::Handle SubgroupTransport::isend(const void* buf, std::size_t bytes, int peer, int tag, const char* op) {
  FTCC_CHECK(tag >= 0 && tag <= tag_ub_) << op << ": tag " << tag << " outside the sub-group's 0.." << tag_ub_;
  return parent_->isend(buf, bytes, to_parent(peer), tag_base_ + tag, op);
}

Transport::Handle SubgroupTransport::irecv(void* buf, std::size_t bytes, int peer, int tag, const char* op) {
  FTCC_CHECK(tag >= 0 && tag <= tag_ub_) << op << ": tag " << tag << " outside the sub-group's 0.." << tag_ub_;
  return parent_->irecv(buf, bytes, to_parent(peer), tag_base_ + tag, op);
}

std::unique_ptr<Transport> SubgroupTransport::clone() const {
  return std::make_unique<SubgroupTransport>(*parent_, members_, tags_);
}

}  // namespace ftcc::comm
