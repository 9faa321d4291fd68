// comm/algorithms.hpp: the allreduce algorithms on an OpContext (internal), so that the blocking
// calls (comm/collectives.hpp) and the nonblocking one (comm/allreduce_async.hpp) share them.
// send is never nullptr here (the public calls resolve "in place" to send == recv).
#pragma once

#include <cstddef>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/op_context.hpp"
#include "ftcc/comm/shm_segment.hpp"

namespace ftcc::comm::detail {

// Defaults, tuned with ftcc-bench (docs/collectives.md).
inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kRingSegmentBytes = 128 * kKiB;
inline constexpr std::size_t kTreeSegmentBytes = 64 * kKiB;
inline constexpr std::size_t kChainSegmentBytes = 128 * kKiB;
inline constexpr int kWindow = 4;
// Default segments per block (ring) or per message (trees) at most; see pick_segment_bytes.
inline constexpr std::size_t kMaxRingSegments = 4;
inline constexpr std::size_t kMaxTreeSegments = 4;
inline constexpr std::size_t kMaxChainSegments = 8;
// rhd_allreduce exchanges whole vectors (recursive doubling) up to this size.
inline constexpr std::size_t kRecursiveDoublingBytes = 4 * kKiB;
// allgather / reduce_scatter on 2^k ranks use recursive doubling / halving (log2 n steps) up to
// these totals (all ranks' data), the ring above them.
inline constexpr std::size_t kRecursiveAllgatherBytes = 1 << 20;
inline constexpr std::size_t kRecursiveReduceScatterBytes = 64 * kKiB;

void ring_allreduce_run(OpContext& ctx, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                        std::size_t segment_bytes, int window);
void tree_allreduce_run(OpContext& ctx, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
                        std::size_t segment_bytes, int window);
void rhd_allreduce_run(OpContext& ctx, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op);
// Ranks on one host, through a channel of the communicator's shared-memory segment (shm_allreduce.cpp).
void shm_allreduce_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv, std::size_t count,
                       DType dtype, ReduceOp op);
// Ranks on several hosts, some with several ranks: shared memory inside each host, point-to-point
// between the hosts' leaders (hierarchical_allreduce.cpp). The channel's hosts() > 1.
void hierarchical_allreduce_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                                std::size_t count, DType dtype, ReduceOp op, const AllreduceOptions& options);
// Whichever of the two the channel's communicator needs, and its name for the OpContext.
void channel_allreduce_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                           std::size_t count, DType dtype, ReduceOp op, const AllreduceOptions& options);
const char* channel_allreduce_name(const ShmSegment::Channel& channel);

// The other collectives of ranks on one host, through the segment's channel 0 (shm_collectives.cpp).
void shm_broadcast_run(OpContext& ctx, ShmSegment::Channel& channel, void* buf, std::size_t bytes, int root);
void shm_allgather_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv, std::size_t block_bytes);
void shm_reduce_scatter_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                            std::size_t recv_count, DType dtype, ReduceOp op);
void shm_barrier_run(OpContext& ctx, ShmSegment::Channel& channel);
// `root`: a host rank. recv: the root's only (reduce, gather); send: the root's only (scatter).
void shm_reduce_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv, std::size_t count,
                    DType dtype, ReduceOp op, int root);
void shm_gather_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv, std::size_t block_bytes,
                    int root);
void shm_scatter_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv, std::size_t block_bytes,
                     int root);
// Host rank == the communicator's rank (every rank on this host). Throws InvalidArgument on every
// rank when some rank's recv_counts differ from what another sends it (the channel stays usable).
// Returns false, on every rank, when some rank sends the others more than kShmAlltoallBytes
// (collectives.hpp) or a message exceeds its part of a slot: the caller then exchanges the data
// point-to-point (measured: docs/collectives.md).
bool shm_alltoallv_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, const std::size_t* send_counts,
                       const std::size_t* send_displs, void* recv, const std::size_t* recv_counts,
                       const std::size_t* recv_displs, std::size_t elem_bytes);
// Channel 0 of the communicator's segment when all its ranks are on one host, else nullptr
// (attaches on first use: call it at the same point on every rank).
ShmSegment::Channel* one_host_channel(Communicator& comm);
// Channel 0 of the communicator's segment, on one host or several (nullptr: every rank is alone on
// its host, or no shared memory); attaches as one_host_channel does.
ShmSegment::Channel* blocking_channel(Communicator& comm);

// The collectives of a communicator spanning several hosts, some with several ranks: shared memory
// inside each host, point-to-point between them (hierarchical_collectives.cpp). channel.hosts() > 1;
// `root` is the communicator's rank. ctx is the whole communicator's.
void hierarchical_broadcast_run(OpContext& ctx, ShmSegment::Channel& channel, void* buf, std::size_t bytes, int root);
void hierarchical_barrier_run(OpContext& ctx, ShmSegment::Channel& channel);
void hierarchical_reduce_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                             std::size_t count, DType dtype, ReduceOp op, int root);
void hierarchical_gather_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                             std::size_t block_bytes, int root);
void hierarchical_scatter_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                              std::size_t block_bytes, int root);
void hierarchical_allgather_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                                std::size_t block_bytes);
void hierarchical_reduce_scatter_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                                     std::size_t recv_count, DType dtype, ReduceOp op);
// The dissemination barrier over ctx's ranks (barrier.cpp).
void dissemination_barrier(OpContext& ctx);

// Runs `algo` (not automatic) with the options' segment size and window.
void allreduce_run(OpContext& ctx, AllreduceAlgo algo, const void* send, void* recv, std::size_t count, DType dtype,
                   ReduceOp op, const AllreduceOptions& options);

// The name an OpContext carries for each algorithm (used in errors and by the fault hook).
const char* allreduce_op_name(AllreduceAlgo algo);

// The shared-memory channel (0: blocking calls, 1: the nonblocking allreduce's progress thread) a
// call with `requested` runs on, or nullptr for MPI point-to-point (allreduce_wants_shm; attaches
// the communicator's segment on first use: call it at the same point on every rank).
ShmSegment::Channel* shm_channel(Communicator& comm, AllreduceAlgo requested, int channel);
// On one host's channel: shm, or the point-to-point algorithm `automatic` takes instead
// (select_one_host_allreduce; shm whenever the call or FTCC_ALLREDUCE_ALGO named an algorithm).
AllreduceAlgo one_host_auto(AllreduceAlgo requested, std::size_t bytes, int ranks);

}  // namespace ftcc::comm::detail
