// hierarchical_collectives: broadcast, reduce, gather, scatter, allgather, reduce_scatter and
// barrier of a communicator whose ranks run on several hosts, some of them with several: shared
// memory inside each host (comm/shm_collectives.cpp), MPI point-to-point between one rank per
// host (its "speaker"). The allreduce is comm/hierarchical_allreduce.cpp.
//
// A collective with a root has the root speak for its own host and each other host's leader (its
// lowest rank) for that host; the others have the leaders speak.
//   broadcast       the speakers broadcast over a binomial tree rooted at the root; then each
//                   speaker broadcasts inside its host.
//   reduce          each host reduces to its speaker (in host-rank order); the speakers reduce
//                   over a binomial tree to the root (children in a fixed order).
//   gather          each host gathers to its speaker; each speaker sends its host's blocks to the
//                   root in one message; the root puts every block in its place.
//   scatter         the reverse: the root sends each other host's blocks to its speaker in one
//                   message, each speaker scatters inside its host.
//   allgather       each host gathers to its leader; every leader sends its host's blocks to every
//                   other leader (one message each); each leader puts all blocks in place and
//                   broadcasts the whole result inside its host.
//   reduce_scatter  each host reduces the whole input to its leader; every leader sends each other
//                   leader the blocks of that host's ranks and reduces what it receives for its own
//                   ranks in host order 0, 1, ... (the hosts in the order of their leaders' ranks);
//                   then scatters them inside its host.
//   barrier         each host's ranks meet in shared memory; the leaders run the dissemination
//                   barrier; each leader releases its host.
// Sums: in host-rank order inside a host, then in a fixed order over the hosts: the same bits on
// every rank and in every run (not the bits of the flat algorithms: another order of the same
// terms). A host with one rank has no shared memory and skips the steps inside the host.
// Failures are the hierarchical allreduce's: a rank that dies is seen by its host's ranks (the
// liveness receives) and by the exchange between the hosts (ULFM); ranks of other hosts waiting in
// shared memory are released by the revoke that follows the first error. A Timeout names ranks of
// the communicator. The per-host buffers live in the context's scratch slots 3 and 4.
#include <algorithm>
#include <cstring>

#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/reduce_kernels.hpp"
#include "ftcc/comm/shm_steps.hpp"
#include "ftcc/comm/subgroup_transport.hpp"
#include "ftcc/comm/tree_phases.hpp"

namespace ftcc::comm::detail {
namespace {

using Channel = ShmSegment::Channel;
using Members = std::vector<std::vector<int>>;

// The communicator's ranks of each host, ascending (host h's ranks 0, 1, ...).
Members hosts_members(const Channel& ch) {
  Members m(static_cast<std::size_t>(ch.hosts()));
  for (std::size_t r = 0; r < ch.host_of().size(); ++r) m[static_cast<std::size_t>(ch.host_of()[r])].push_back(static_cast<int>(r));
  return m;
}

// Who speaks for each host: `root` for its own, the leader for every other.
std::vector<int> speakers(const Members& members, int root) {
  std::vector<int> s;
  for (const auto& m : members) s.push_back(std::find(m.begin(), m.end(), root) != m.end() ? root : m.front());
  return s;
}

TreeParams tree_params(std::size_t bytes) {
  return {pick_segment_bytes(0, kTreeSegmentBytes, bytes, kMaxTreeSegments), kWindow};
}

// The speakers' exchange: a part of the whole call on a sub-group of the communicator that keeps
// its tags (sub-group rank h: host h's speaker).
struct SpeakersPart {
  SpeakersPart(OpContext& whole, std::vector<int> ranks)
      : names(std::move(ranks)), transport(whole.transport(), names, SubgroupTransport::Tags::parents),
        ctx(whole, transport, names) {}
  std::vector<int> names;
  SubgroupTransport transport;
  OpContext ctx;
};

std::size_t total_of(const Members& members) {
  std::size_t n = 0;
  for (const auto& m : members) n += m.size();
  return n;
}

// A collective with a root: who speaks for each host, and this rank's part.
struct Rooted {
  Rooted(const Channel& ch, int root)
      : members(hosts_members(ch)), speaker(speakers(members, root)), root_host(ch.host_of()[static_cast<std::size_t>(root)]),
        host_speaker(ch.host_rank_of(speaker[static_cast<std::size_t>(ch.host())])), speaks(ch.rank() == host_speaker),
        is_root(ch.comm_rank(ch.rank()) == root) {}
  Members members;
  std::vector<int> speaker;  // the communicator's rank speaking for host h
  int root_host;
  int host_speaker;  // this host's speaker, as a host rank
  bool speaks, is_root;
};

// Receives host h's blocks (host-rank order, one message from from[h]) for every host but this
// one, whose blocks are at `mine`, and puts every block at out + (its rank) * block. The received
// ones pass through scratch slot 4. Sends already posted (`hs`) are waited for with them.
void collect_hosts(OpContext& ctx, const Channel& ch, const Members& members, const std::vector<int>& from,
                   const std::byte* mine, std::size_t block, std::byte* out, std::vector<OpContext::Handle>& hs) {
  const auto local = static_cast<std::size_t>(ch.size());
  std::byte* from_hosts = ctx.scratch((total_of(members) - local) * block, 4);
  std::vector<const std::byte*> at(members.size());
  std::size_t off = 0;
  for (std::size_t h = 0; h < members.size(); ++h) {
    if (static_cast<int>(h) == ch.host()) {
      at[h] = mine;
      continue;
    }
    at[h] = from_hosts + off;
    hs.push_back(ctx.irecv(from_hosts + off, members[h].size() * block, from[h]));
    off += members[h].size() * block;
  }
  ctx.wait_all(hs.data(), hs.size());
  for (std::size_t h = 0; h < members.size(); ++h)
    for (std::size_t i = 0; i < members[h].size(); ++i) {
      std::byte* to = out + static_cast<std::size_t>(members[h][i]) * block;
      if (to != at[h] + i * block) std::memcpy(to, at[h] + i * block, block);
    }
}

}  // namespace

void hierarchical_broadcast_run(OpContext& ctx, Channel& ch, void* buf, std::size_t bytes, int root) {
  const ShmCall call(ctx, ch);
  const Rooted r(ch, root);
  if (r.speaks) {
    SpeakersPart part(ctx, r.speaker);
    tree_broadcast(part.ctx, buf, bytes, binomial_tree(part.ctx.rank(), part.ctx.size(), r.root_host, true),
                   tree_params(bytes));
  }
  if (ch.size() > 1) shm_broadcast_run(ctx, ch, buf, bytes, r.host_speaker);
}

void hierarchical_reduce_run(OpContext& ctx, Channel& ch, const void* send, void* recv, std::size_t count, DType dtype,
                             ReduceOp op, int root) {
  const ShmCall call(ctx, ch);
  const Rooted r(ch, root);
  const std::size_t bytes = count * dtype_size(dtype);
  // 1. Inside the host, to its speaker.
  const void* host_sum = send;  // a host of one rank: its input
  void* acc = nullptr;          // where a speaker with children in the tree stages partial sums
  if (r.speaks) acc = r.is_root ? recv : ch.size() > 1 ? ctx.scratch(bytes, 3) : nullptr;
  if (ch.size() > 1) {
    shm_reduce_run(ctx, ch, send, acc, count, dtype, op, r.host_speaker);
    host_sum = acc;
  }
  if (!r.speaks) return;
  // 2. The speakers, to the root.
  SpeakersPart part(ctx, r.speaker);
  tree_reduce(part.ctx, host_sum, acc, count, dtype, op, binomial_tree(part.ctx.rank(), part.ctx.size(), r.root_host, false),
              tree_params(bytes));
}

void hierarchical_gather_run(OpContext& ctx, Channel& ch, const void* send, void* recv, std::size_t block, int root) {
  const ShmCall call(ctx, ch);
  const Rooted r(ch, root);
  const auto local = static_cast<std::size_t>(ch.size());
  // 1. Inside the host, to its speaker: the host's blocks in host-rank order.
  const auto* host_blocks = static_cast<const std::byte*>(send);
  if (ch.size() > 1) {
    std::byte* b = r.speaks ? ctx.scratch(local * block, 3) : nullptr;
    shm_gather_run(ctx, ch, send, b, block, r.host_speaker);
    host_blocks = b;
  }
  if (!r.speaks) return;
  if (!r.is_root) {
    ctx.wait(ctx.isend(host_blocks, local * block, root));
    return;
  }
  // 2. The root: every other host's blocks in one message from its speaker.
  std::vector<OpContext::Handle> hs;
  collect_hosts(ctx, ch, r.members, r.speaker, host_blocks, block, static_cast<std::byte*>(recv), hs);
}

void hierarchical_scatter_run(OpContext& ctx, Channel& ch, const void* send, void* recv, std::size_t block, int root) {
  const ShmCall call(ctx, ch);
  const Rooted r(ch, root);
  const Members& members = r.members;
  const auto local = static_cast<std::size_t>(ch.size());
  const auto* in = static_cast<const std::byte*>(send);
  auto pack = [&](std::byte* to, std::size_t h) {  // host h's blocks, in host-rank order
    for (std::size_t i = 0; i < members[h].size(); ++i)
      std::memcpy(to + i * block, in + static_cast<std::size_t>(members[h][i]) * block, block);
  };
  std::vector<OpContext::Handle> hs;
  const std::byte* host_blocks = nullptr;  // the speaker's: its host's blocks in host-rank order
  if (r.is_root) {
    // 1. The root: each other host's blocks in one message to its speaker.
    std::byte* packed = ctx.scratch((total_of(members) - local) * block, 4);
    std::size_t off = 0;
    for (std::size_t h = 0; h < members.size(); ++h) {
      if (static_cast<int>(h) == ch.host()) continue;
      pack(packed + off, h);
      hs.push_back(ctx.isend(packed + off, members[h].size() * block, r.speaker[h]));
      off += members[h].size() * block;
    }
    std::byte* mine = ctx.scratch(local * block, 3);
    pack(mine, static_cast<std::size_t>(ch.host()));
    host_blocks = mine;
  } else if (r.speaks) {
    std::byte* mine = ctx.scratch(local * block, 3);
    ctx.wait(ctx.irecv(mine, local * block, root));
    host_blocks = mine;
  }
  // 2. Inside the host.
  if (ch.size() > 1)
    shm_scatter_run(ctx, ch, host_blocks, recv, block, r.host_speaker);
  else if (recv != nullptr)
    std::memcpy(recv, host_blocks, block);
  ctx.wait_all(hs.data(), hs.size());
}

void hierarchical_allgather_run(OpContext& ctx, Channel& ch, const void* send, void* recv, std::size_t block) {
  const ShmCall call(ctx, ch);
  const Members members = hosts_members(ch);
  const bool leader = ch.rank() == 0;
  const auto local = static_cast<std::size_t>(ch.size());
  const std::size_t total = total_of(members) * block;
  auto* out = static_cast<std::byte*>(recv);
  // 1. Inside the host, to its leader.
  const auto* host_blocks = static_cast<const std::byte*>(send);
  if (ch.size() > 1) {
    std::byte* b = leader ? ctx.scratch(local * block, 3) : nullptr;
    shm_gather_run(ctx, ch, send, b, block, 0);
    host_blocks = b;
  }
  if (leader) {
    // 2. Every leader sends its host's blocks to every other leader.
    std::vector<int> leaders;
    for (const auto& m : members) leaders.push_back(m.front());
    std::vector<OpContext::Handle> hs;
    for (std::size_t k = 1; k < members.size(); ++k) {  // host + 1 first, as alltoallv does
      const std::size_t h = (static_cast<std::size_t>(ch.host()) + k) % members.size();
      hs.push_back(ctx.isend(host_blocks, local * block, leaders[h]));
    }
    collect_hosts(ctx, ch, members, leaders, host_blocks, block, out, hs);
  }
  // 3. Inside the host, from its leader.
  if (ch.size() > 1) shm_broadcast_run(ctx, ch, out, total, 0);
}

void hierarchical_reduce_scatter_run(OpContext& ctx, Channel& ch, const void* send, void* recv, std::size_t recv_count,
                                     DType dtype, ReduceOp op) {
  const ShmCall call(ctx, ch);
  const Members members = hosts_members(ch);
  const bool leader = ch.rank() == 0;
  const auto local = static_cast<std::size_t>(ch.size());
  const std::size_t n = total_of(members), block = recv_count * dtype_size(dtype);
  const auto hosts = members.size(), me = static_cast<std::size_t>(ch.host());
  // 1. Inside the host: the whole input, to its leader.
  const auto* sum = static_cast<const std::byte*>(send);
  if (ch.size() > 1) {
    std::byte* b = leader ? ctx.scratch(n * block, 3) : nullptr;
    shm_reduce_run(ctx, ch, send, b, n * recv_count, dtype, op, 0);
    sum = b;
  }
  const std::byte* mine = nullptr;  // the leader's: its host's blocks, reduced over every host
  if (leader) {
    // 2. Each leader sends every other leader the blocks of its host's ranks, and receives its
    // own ranks' blocks from each: region h of `work` holds host h's terms (local blocks).
    std::byte* work = ctx.scratch((n - local + hosts * local) * block, 4);
    std::byte* outgoing = work + hosts * local * block;
    std::vector<OpContext::Handle> hs;
    for (std::size_t h = 0; h < hosts; ++h)
      if (h != me) hs.push_back(ctx.irecv(work + h * local * block, local * block, members[h].front()));
    std::size_t off = 0;
    for (std::size_t k = 1; k < hosts; ++k) {
      const std::size_t h = (me + k) % hosts;
      for (std::size_t i = 0; i < members[h].size(); ++i)
        std::memcpy(outgoing + off + i * block, sum + static_cast<std::size_t>(members[h][i]) * block, block);
      hs.push_back(ctx.isend(outgoing + off, members[h].size() * block, members[h].front()));
      off += members[h].size() * block;
    }
    for (std::size_t i = 0; i < local; ++i)
      std::memcpy(work + (me * local + i) * block, sum + static_cast<std::size_t>(members[me][i]) * block, block);
    ctx.wait_all(hs.data(), hs.size());
    for (std::size_t h = 1; h < hosts; ++h)
      reduce(work, work, work + h * local * block, local * recv_count, dtype, op);
    mine = work;
  }
  // 3. Inside the host, from its leader.
  if (ch.size() > 1)
    shm_scatter_run(ctx, ch, mine, recv, block, 0);
  else
    std::memcpy(recv, mine, block);
}

void hierarchical_barrier_run(OpContext& ctx, Channel& ch) {
  const ShmCall call(ctx, ch);
  if (ch.size() > 1) shm_barrier_run(ctx, ch);  // every rank of this host has arrived
  if (ch.rank() == 0) {
    const Members members = hosts_members(ch);
    std::vector<int> leaders;
    for (const auto& m : members) leaders.push_back(m.front());
    SpeakersPart part(ctx, leaders);
    dissemination_barrier(part.ctx);
  }
  if (ch.size() == 1) return;
  // The leader releases its host.
  const std::uint64_t round = ch.next_round();
  if (ch.rank() == 0) {
    shm_raise(ctx, ch.reduced(0), round);
    shm_raise(ctx, ch.arrived(0), round);
  } else {
    shm_raise(ctx, ch.arrived(ch.rank()), round);
    shm_wait_for(ctx, ch, true, 0, round);
  }
}

}  // namespace ftcc::comm::detail
