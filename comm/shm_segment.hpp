// comm/shm_segment.hpp: shared memory for the ranks of a communicator that run on one host
// (internal to comm/; the collectives that use it are comm/shm_allreduce.cpp and
// shm_collectives.cpp, for a communicator on one host, and comm/hierarchical_allreduce.cpp and
// hierarchical_collectives.cpp, for one spanning several).
//
// ShmSegment::attach(comm) is collective over `comm` (every rank calls it, in the same order as
// the other collectives). The ranks allgather their host keys (comm/host_identity.hpp's
// shared_memory_identity, plus FTCC_SHM_GROUP when set: ranks of one host with different values count as different hosts) and
// group themselves by host; a host is led by its lowest rank. Each leader of a host with several
// ranks creates an anonymous memory file (memfd_create; its pages do not come from /dev/shm, so a
// /dev/shm that fills up later cannot take them) that the others open through
// /proc/<leader's pid>/fd/<fd>. If any rank cannot map it, or FTCC_SHM_BACKING=posix on any
// rank, the leaders create named objects in /dev/shm instead (named after the job: FTCC_JOB_DIR's
// name and inode, else the pid), only with at least twice their size free there and every page
// reserved at set-up (posix_fallocate, 7-11 ms on 2-4 ranks: never a SIGBUS later). Every rank
// maps its host's, and each leader unlinks its name (or closes its file) as soon as every rank of
// the communicator has mapped its own. So nothing is left in /dev/shm by a job, even one whose
// every rank is killed later; only a kill inside those few milliseconds leaves a name, and
// tools/ftcc-run removes the job's names when the job ends. Returns nullptr (the caller uses MPI
// point-to-point alone) when every rank is alone on its host, when the communicator is not an MPI
// one, when FTCC_SHM=0 on any rank, or when any rank could not map either (each rank learns the
// same answer). Throws InvalidArgument on every rank when some rank's FTCC_SHM_BACKING is neither
// memfd nor posix; otherwise what the collectives throw.
//
// A segment holds two channels: channel 0 for the blocking calls on the communicator's thread,
// channel 1 for the nonblocking allreduce's progress thread; one thread uses a channel at a time.
// Each channel has per-rank sequence flags and two generations of per-rank slots (double
// buffering: a collective never waits for the slowest reader of the previous one). A channel's
// ranks are the host's (0 = its leader). On a communicator spanning several hosts a channel also
// has an endpoint to the other hosts (across()): when every host has the same number of ranks,
// every rank has one, to the ranks of the same place on the other hosts (its "column"); otherwise
// only the leaders have one, to the other hosts' leaders.
//
// Liveness: a shared-memory wait sees no MPI error by itself, so each channel keeps a receive
// posted from every peer of its host on a tag nothing sends (Communicator::liveness_tag), through
// its own endpoint on the communicator's transport (so a sub-group's ranks are mapped as for its
// other messages: comm/subgroup_transport.hpp). ULFM completes such a receive in error when that
// peer fails or the communicator is revoked; the waits test them (check_peers) and throw
// ProcessFailed / Revoked exactly as a point-to-point collective does. A rank that fails on
// another host is seen by that host's ranks and by the leaders' exchange; the others are released
// by the revoke that the recovery layer (or the caller) issues on the first error.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/transport.hpp"

namespace ftcc::comm {

class Communicator;

namespace detail {

class ShmSegment {
 public:
  static constexpr int kChannels = 2;
  static constexpr int kGenerations = 2;

  // What a rank says it is calling, written before it raises the first `arrived` flag of a
  // collective and compared by every rank after it saw all of them (comm/shm_steps.hpp).
  struct CallDesc {
    std::uint64_t round = 0;  // the channel's round it was written for
    std::uint64_t count = 0;  // elements (reductions) or bytes (the others)
    std::int32_t root = -1;   // the root's host rank, else -1
    std::int8_t kind = 0;     // ShmKind (comm/shm_steps.hpp)
    std::int8_t dtype = -1;   // DType of a reduction, else -1
    std::int8_t op = -1;      // ReduceOp of a reduction, else -1
    bool operator==(const CallDesc& o) const {
      return count == o.count && kind == o.kind && dtype == o.dtype && op == o.op && root == o.root;
    }
  };

  // One rank's flags in a channel, each on its own cache line. An `arrived` flag's line also holds
  // the rank's call descriptors (one per generation of slots), so a rank that reads the flag has
  // them without another cache miss.
  struct alignas(64) Flag {
    std::atomic<std::uint64_t> value;
    CallDesc calls[kGenerations];
  };
  static_assert(sizeof(Flag) == 64, "a flag and its descriptors fill one cache line");

  // What one collective works with: its rank's view of one channel.
  class Channel {
   public:
    // This rank's place among its host's ranks, and their count.
    int rank() const { return rank_; }
    int size() const { return size_; }
    // The communicator's rank of host rank r (for the messages of errors).
    int comm_rank(int r) const { return members_[static_cast<std::size_t>(r)]; }
    // The number of hosts the communicator spans.
    int hosts() const { return hosts_; }
    // The host of each of the communicator's ranks (0 .. hosts() - 1, in the order of their
    // leaders' ranks: host h is led by the h-th leader), and this rank's host.
    const std::vector<int>& host_of() const { return host_of_; }
    int host() const { return host_of_[static_cast<std::size_t>(members_[static_cast<std::size_t>(rank_)])]; }
    // Host rank of the communicator's rank `r`, which must be on this host.
    int host_rank_of(int r) const;
    // On a communicator spanning several hosts: an endpoint to the other hosts, whose ranks are the
    // hosts (in the order of their leaders' ranks) and whose tags are the communicator's. With
    // sliced(): every rank's, to the ranks of the same host rank on every host; otherwise the
    // leaders' (rank() == 0), to the other leaders. nullptr elsewhere. across_ranks()[h]: the
    // communicator's rank of that endpoint's rank h.
    Transport* across() const { return across_.get(); }
    const std::vector<int>& across_ranks() const { return across_ranks_; }
    // Every host has size() ranks (the hierarchical allreduce then splits the exchange between
    // the hosts over all of them).
    bool sliced() const { return sliced_; }
    // A collective that leaves this channel by an exception may leave the ranks at different
    // rounds (one raised a flag the others never waited for): the channel is then unusable, and
    // ShmCall refuses it (comm/shm_steps.hpp).
    bool broken() const { return broken_; }
    void mark_broken() { broken_ = true; }
    // A CollectiveMismatch was thrown on every rank at the same round (shm_verify): the calls
    // leaving by it leave the channel usable. Cleared when the next outermost call starts.
    bool mismatch_thrown() const { return mismatch_thrown_; }
    void set_mismatch_thrown() { mismatch_thrown_ = true; }
    void clear_mismatch_thrown() { mismatch_thrown_ = false; }
    // Bytes of one slot: the largest piece of a collective handled per round.
    std::size_t slot_bytes() const { return slot_bytes_; }
    // Slot `r` of generation g (r == size(): the reduced result).
    std::byte* slot(int generation, int r) const;
    Flag& arrived(int r) const { return arrived_[r]; }
    Flag& reduced(int r) const { return reduced_[r]; }
    // Host rank r's call descriptor of generation g.
    CallDesc& call(int generation, int r) const { return arrived_[r].calls[generation]; }
    // Generation g's root claim: round * 65536 + the host rank + 1 of the rank that took the
    // round as a broadcast's or scatter's root (a second root finds it taken).
    Flag& claim(int generation) const { return claims_[generation]; }
    // The descriptor of the collective this rank has started and not yet compared (ShmCall sets
    // it; the first round writes and compares it, comm/shm_steps.hpp).
    const CallDesc* pending() const { return has_pending_ ? &pending_ : nullptr; }
    void set_pending(const CallDesc& d) { pending_ = d; has_pending_ = true; }
    void clear_pending() { has_pending_ = false; }
    // The sequence number of this channel's next round (the same on every rank).
    std::uint64_t next_round() { return ++round_; }
    // Throws ProcessFailed / Revoked when ULFM failed a liveness receive (a peer died, or the
    // communicator was revoked). `op` names the collective.
    void check_peers(const char* op);

   private:
    friend class ShmSegment;
    int rank_ = 0, size_ = 1, hosts_ = 1;
    std::size_t slot_bytes_ = 0;
    std::byte* data_ = nullptr;  // kGenerations x (size + 1) slots
    Flag* arrived_ = nullptr;
    Flag* reduced_ = nullptr;
    Flag* claims_ = nullptr;     // kGenerations
    CallDesc pending_;
    bool has_pending_ = false;
    std::uint64_t round_ = 0;
    std::vector<int> members_;              // the communicator's ranks of this host's ranks
    std::vector<int> host_of_;              // the host of each of the communicator's ranks
    std::vector<int> across_ranks_;
    std::unique_ptr<Transport> across_;
    bool sliced_ = false;
    bool broken_ = false;
    bool mismatch_thrown_ = false;
    std::unique_ptr<Transport> transport_;  // the liveness receives' endpoint
    std::vector<Transport::Handle> liveness_;
    std::vector<bool> posted_;  // liveness_[p] is a receive still posted (never for this rank)
  };

  static std::unique_ptr<ShmSegment> attach(Communicator& comm);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  Channel& channel(int c) { return channels_[c]; }
  std::size_t bytes() const { return bytes_; }
  // The number of hosts the communicator spans (1: the shared-memory collectives; more: the
  // hierarchical ones).
  int hosts() const { return hosts_; }
  // The shared-memory name prefix of this job's segments (tools/ftcc-run removes "/dev/shm/" + it
  // + "*" after the job): "ftcc-shm." + the job folder's name (its first 64 characters) + "." + its inode number (two
  // folders of one name are two jobs), else "ftcc-shm.pid<pid>".
  static std::string name_prefix();
  // Slot bytes for `ranks` ranks: the segment stays within about 48 MiB.
  static std::size_t slot_bytes_for(int ranks);

 private:
  ShmSegment() = default;
  void* base_ = nullptr;  // nullptr for a rank alone on its host
  std::size_t bytes_ = 0;
  int hosts_ = 1;
  Channel channels_[kChannels];
};

}  // namespace detail
}  // namespace ftcc::comm
