// comm/collectives.hpp: ftcc's collectives, written on point-to-point (comm/transport.hpp).
//
// Buffers are raw: (pointer, count of elements, DType). Counts are size_t. "In place" means
// send == recv or send == nullptr (kInPlace). Every call:
//   - runs the same algorithm on every rank; all ranks call collectives in the same order;
//   - waits with a deadline (options.timeout_s, 0 = the communicator's) and throws Timeout
//     naming the peers it still waited for;
//   - throws ProcessFailed / Revoked (comm/errors.hpp) as soon as MPI (ULFM) reports a dead peer
//     or a revoked communicator, after abandoning its outstanding requests;
//   - gives every rank bitwise-identical results (each element is reduced once, or with
//     commutative pairwise steps, so no rank sees a different rounding).
// After a Timeout or a failure the communicator's collective sequence may differ between ranks:
// revoke and shrink it (comm/ulfm.hpp), or stop using it.
//
// Algorithms (one per file):
//   ring_allreduce    reduce-scatter + allgather around a ring, segmented and pipelined
//                     (bandwidth-optimal: 2(n-1)/n of the data per rank; 2(n-1) steps)
//   tree_allreduce    pipelined binomial-tree reduce to rank 0 + pipelined broadcast (latency)
//   rhd_allreduce     recursive halving reduce-scatter + recursive doubling allgather
//                     (Rabenseifner; 2 log2(n) steps); small messages: recursive doubling
//   shm_allreduce     ranks on one host: through a shared-memory segment, each rank reducing
//                     its slice from every rank's buffer (comm/shm_segment.hpp; FTCC_SHM=0 off)
//   hierarchical_allreduce  ranks on several hosts, some with several: shared memory inside
//                     each host, point-to-point between hosts (comm/hierarchical_allreduce.cpp)
//   allreduce         shm or hierarchical when some host has several ranks (on one host, auto
//                     takes point-to-point where that measured faster: select_one_host_allreduce),
//                     else one of the three above by size and rank count (select_allreduce_algo); or
//                     options.algo, or FTCC_ALLREDUCE_ALGO=ring|tree|rhd|shm|auto (shm falls back
//                     to the choice by size where every rank is alone on its host)
//   broadcast         binomial tree, or pipelined chain for large messages on more than 4 ranks
//   reduce            pipelined binomial tree
//   reduce_scatter    recursive halving (small, 2^k ranks) or ring; block r lands on rank r
//   allgather         recursive doubling (small, 2^k ranks) or ring
//   barrier           dissemination (ceil(log2 n) rounds of zero-byte messages)
//   alltoallv         every rank to every rank, all messages in flight at once (alltoall.cpp)
//   gather, scatter   linear, to or from a root (gather.cpp)
//   Shared memory: with every rank on one host, broadcast (`auto`), reduce, reduce_scatter,
//                     allgather, gather, scatter and barrier run through the communicator's
//                     segment (comm/shm_collectives.cpp); alltoallv exchanges its counts there, and
//                     its data too up to 64 KiB per rank. On several hosts, some with several
//                     ranks, the same collectives (alltoallv aside) are hierarchical: shared
//                     memory inside each host, point-to-point between one rank per host
//                     (comm/hierarchical_collectives.cpp). FTCC_SHM=0 turns all of it off.
//   allreduce_async   nonblocking allreduce: start now, wait() later (comm/allreduce_async.hpp)
//
// Options expose segment_bytes and window (segments in flight) so tests reach the multi-segment
// paths with small inputs, and the benchmark can tune them.
#pragma once

#include <cstddef>
#include <string_view>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/types.hpp"

namespace ftcc::comm {

inline constexpr const void* kInPlace = nullptr;

enum class AllreduceAlgo { automatic, ring, tree, rhd, shm };
const char* to_string(AllreduceAlgo a);
// "auto", "ring", "tree", "rhd", "shm"; throws InvalidArgument.
AllreduceAlgo parse_allreduce_algo(std::string_view s);

struct AllreduceOptions {
  AllreduceAlgo algo = AllreduceAlgo::automatic;  // automatic: FTCC_ALLREDUCE_ALGO, else by size
  double timeout_s = 0;                           // 0: the communicator's timeout
  std::size_t segment_bytes = 0;                  // 0: the algorithm's default
  int window = 0;                                 // segments in flight; 0: default
};

struct CollectiveOptions {
  double timeout_s = 0;
  std::size_t segment_bytes = 0;
  int window = 0;
};

enum class BroadcastAlgo { automatic, binomial, chain };
struct BroadcastOptions {
  BroadcastAlgo algo = BroadcastAlgo::automatic;  // automatic: chain from kChainBroadcastBytes on
                                                  // more than kChainBroadcastMinRanks ranks
  double timeout_s = 0;
  std::size_t segment_bytes = 0;
  int window = 0;
};

// ---- allreduce ------------------------------------------------------------------------------
void allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
               const AllreduceOptions& options = {});
void ring_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                    const CollectiveOptions& options = {});
void tree_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                    const CollectiveOptions& options = {});
void rhd_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                   const CollectiveOptions& options = {});

// What `automatic` picks over MPI point-to-point for a message of `bytes` on `ranks` ranks
// (FTCC_ALLREDUCE_ALGO and shared memory aside). Thresholds come from ftcc-bench on the
// development machine: docs/collectives.md.
AllreduceAlgo select_allreduce_algo(std::size_t bytes, int ranks);
// What `automatic` picks where every rank is on one host with `cpus` online CPUs: shm, or a
// point-to-point algorithm where that measured faster (2 ranks, one per core, 256 KiB up to 8 MiB).
// Thresholds: docs/collectives.md, "Auto on one host".
AllreduceAlgo select_one_host_allreduce(std::size_t bytes, int ranks, int cpus);
// The point-to-point algorithm a call with `requested` runs when it does not run on shared memory:
// requested if ring, tree or rhd; else the environment's (FTCC_ALLREDUCE_ALGO) if one of those;
// else select_allreduce_algo.
AllreduceAlgo resolve_allreduce_algo(AllreduceAlgo requested, std::size_t bytes, int ranks);
// Whether a call with `requested` runs on shared memory where the communicator has it: shm, or
// automatic with FTCC_ALLREDUCE_ALGO unset, auto or shm.
bool allreduce_wants_shm(AllreduceAlgo requested);

// ---- the others -----------------------------------------------------------------------------
// buf holds count elements on root on entry and on every rank on return.
void broadcast(Communicator& comm, void* buf, std::size_t count, DType dtype, int root,
               const BroadcastOptions& options = {});
inline constexpr std::size_t kChainBroadcastBytes = 1 << 20;
inline constexpr int kChainBroadcastMinRanks = 4;

// recv (count elements) is significant on root only; other ranks may pass nullptr.
void reduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op, int root,
            const CollectiveOptions& options = {});

// MPI_Reduce_scatter_block: send holds size()*recv_count elements; rank r receives block r of the
// reduction. In place (send == nullptr or recv): recv holds the size()*recv_count input and gets
// the result in its first recv_count elements.
void reduce_scatter(Communicator& comm, const void* send, void* recv, std::size_t recv_count, DType dtype,
                    ReduceOp op, const CollectiveOptions& options = {});

// recv gets size()*send_count elements, block r from rank r. In place (send == nullptr or
// send == recv + rank*send_count): rank r's block is already in recv.
void allgather(Communicator& comm, const void* send, void* recv, std::size_t send_count, DType dtype,
               const CollectiveOptions& options = {});

void barrier(Communicator& comm, const CollectiveOptions& options = {});

// MPI_Alltoallv in elements: rank r sends send_counts[p] elements from send + send_displs[p] to
// rank p and receives recv_counts[p] elements from p at recv + recv_displs[p] (each array has
// size() entries). What r sends p must be what p expects from r: with every rank on one host a
// mismatch is an InvalidArgument on every rank, naming both (the counts go through shared memory);
// over point-to-point, a Timeout or a truncation error, or (a shorter message) no error at all.
// send and recv must not overlap.
// gather, scatter and alltoallv take host memory (no CUDA device pointers).
// With every rank on one host, alltoallv's data goes through shared memory when no rank sends the
// others more than this in all (its counts always do), else point-to-point.
inline constexpr std::size_t kShmAlltoallBytes = 64 * 1024;
void alltoallv(Communicator& comm, const void* send, const std::size_t* send_counts, const std::size_t* send_displs,
               void* recv, const std::size_t* recv_counts, const std::size_t* recv_displs, DType dtype,
               const CollectiveOptions& options = {});
// MPI_Gather: recv (size()*send_count elements, root only) gets block r from rank r. The root's
// own block may already be in place (send == nullptr or recv + root*send_count).
void gather(Communicator& comm, const void* send, void* recv, std::size_t send_count, DType dtype, int root,
            const CollectiveOptions& options = {});
// MPI_Scatter: rank r gets block r of the root's send (size()*recv_count elements, root only).
void scatter(Communicator& comm, const void* send, void* recv, std::size_t recv_count, DType dtype, int root,
             const CollectiveOptions& options = {});

}  // namespace ftcc::comm
