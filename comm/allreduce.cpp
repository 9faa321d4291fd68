// allreduce: picks ring, tree or rhd. The thresholds come from a repeated sweep on the development
// machine (docs/collectives.md has the table and the command); re-measure with bench/comm/auto_sweep
// before changing them.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/algorithms.hpp"
#include "ftcc/comm/device_staging.hpp"

namespace ftcc::comm {

const char* to_string(AllreduceAlgo a) {
  switch (a) {
    case AllreduceAlgo::automatic: return "auto";
    case AllreduceAlgo::ring: return "ring";
    case AllreduceAlgo::tree: return "tree";
    case AllreduceAlgo::rhd: return "rhd";
    case AllreduceAlgo::shm: return "shm";
  }
  return "?";
}

AllreduceAlgo parse_allreduce_algo(std::string_view s) {
  if (s == "auto" || s == "automatic") return AllreduceAlgo::automatic;
  if (s == "ring") return AllreduceAlgo::ring;
  if (s == "tree") return AllreduceAlgo::tree;
  if (s == "rhd") return AllreduceAlgo::rhd;
  if (s == "shm") return AllreduceAlgo::shm;
  FTCC_CHECK(false) << "unknown allreduce algorithm '" << std::string(s) << "' (ring, tree, rhd, shm, auto)";
  return AllreduceAlgo::automatic;
}

// From bench/comm/auto_sweep on 2, 3 and 4 ranks: 5 runs of ftcc-bench per rank count; "ahead"
// is the median over runs of the slower algorithm's time / the faster one's in the same run
// (docs/collectives.md, "Auto thresholds", has the command, the medians and the spreads):
//   2 ranks        rhd < 8 KiB, ring from 8 KiB. Tree (reduce, then broadcast: two full-size hops
//                  in series) was 1.05-2.1x behind the best from 4 KiB up. rhd was 1.08x ahead of
//                  ring at 1 MiB (not worth splitting the ring range); elsewhere ring led (to
//                  1.18x) or tied.
//   < 512 B        rhd (recursive doubling, log2 n exchanges; tied with tree on 4, ahead on 3)
//   < 4 KiB        rhd on 2^k ranks; tree otherwise (the fold costs rhd two hops: 1.4-1.8x on 3)
//   other than 2^k ranks, from 4 KiB: tree < 256 KiB, then ring (on 3 ranks tree was 1.3-1.7x
//                  ahead of rhd at 4-64 KiB and 1.08x at 128 KiB; ring was ahead of tree from
//                  256 KiB and 1.1-1.6x ahead of rhd from 512 KiB)
//   2^k ranks, from 4 KiB:
//   < 128 KiB      tree (one or two segments; 1.3-1.6x ahead of rhd at 8-64 KiB on 4)
//   < 4 MiB        rhd (2 log2 n large messages; 1.1-1.3x ahead of ring on 4 at 128 KiB-1 MiB)
//   >= 4 MiB       ring (bandwidth-optimal, pipelined; ties rhd on 4 ranks up to 64 MiB)
AllreduceAlgo select_allreduce_algo(std::size_t bytes, int ranks) {
  const bool pow2 = ranks > 0 && (ranks & (ranks - 1)) == 0;
  constexpr std::size_t KiB = detail::kKiB, MiB = 1024 * KiB;
  if (ranks == 2) return bytes < 8 * KiB ? AllreduceAlgo::rhd : AllreduceAlgo::ring;
  if (bytes < 512) return AllreduceAlgo::rhd;
  if (bytes < 4 * KiB) return pow2 ? AllreduceAlgo::rhd : AllreduceAlgo::tree;
  if (!pow2) return bytes < 256 * KiB ? AllreduceAlgo::tree : AllreduceAlgo::ring;
  if (bytes < 128 * KiB) return AllreduceAlgo::tree;
  if (bytes < 4 * MiB) return AllreduceAlgo::rhd;
  return AllreduceAlgo::ring;
}

// From bench/comm/auto_sweep on this 2-core machine (docs/collectives.md, "Auto on one host"),
// comparing shm with what auto picked over point-to-point in the same runs:
//   3 and 4 ranks (more ranks than CPUs): shm led at every size from 8 B to 64 MiB, by 1.16-2.8x.
//   2 ranks on 2 CPUs (one rank per core): point-to-point led from 256 KiB to 4 MiB (MPI's
//   single-copy path moves each byte once; shm copies in, reduces and copies out): ring at
//   256 KiB, rhd (one exchange) from 512 KiB to 4 MiB, 1.2-1.8x ahead of shm at 512 KiB to
//   2 MiB; shm led or tied from 8 MiB and below 256 KiB. One rank per core at more than 2 ranks
//   was not measured: shm there.
AllreduceAlgo select_one_host_allreduce(std::size_t bytes, int ranks, int cpus) {
  constexpr std::size_t KiB = detail::kKiB, MiB = 1024 * KiB;
  if (ranks == 2 && cpus >= 2) {
    if (bytes >= 256 * KiB && bytes < 512 * KiB) return AllreduceAlgo::ring;
    if (bytes >= 512 * KiB && bytes < 8 * MiB) return AllreduceAlgo::rhd;
  }
  return AllreduceAlgo::shm;
}

namespace {
int online_cpus() {
  static const int n = [] {
    const long c = sysconf(_SC_NPROCESSORS_ONLN);  // the host's, the same for every rank on it
    return c > 0 ? static_cast<int>(c) : 1;
  }();
  return n;
}

// FTCC_ALLREDUCE_ALGO, read on every call (a test switches it between calls); automatic if unset.
AllreduceAlgo env_algo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only; nothing in ftcc calls setenv
  const char* env = std::getenv("FTCC_ALLREDUCE_ALGO");
  return env && *env ? parse_allreduce_algo(env) : AllreduceAlgo::automatic;
}
bool point_to_point(AllreduceAlgo a) {
  return a == AllreduceAlgo::ring || a == AllreduceAlgo::tree || a == AllreduceAlgo::rhd;
}
}  // namespace

AllreduceAlgo resolve_allreduce_algo(AllreduceAlgo requested, std::size_t bytes, int ranks) {
  if (point_to_point(requested)) return requested;
  if (const AllreduceAlgo a = env_algo(); point_to_point(a)) return a;
  return select_allreduce_algo(bytes, ranks);
}

bool allreduce_wants_shm(AllreduceAlgo requested) {
  if (requested != AllreduceAlgo::automatic) return requested == AllreduceAlgo::shm;
  return !point_to_point(env_algo());
}

namespace detail {

const char* allreduce_op_name(AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::ring: return "ring_allreduce";
    case AllreduceAlgo::tree: return "tree_allreduce";
    case AllreduceAlgo::rhd: return "rhd_allreduce";
    case AllreduceAlgo::shm: return "shm_allreduce";
    case AllreduceAlgo::automatic: break;
  }
  return "allreduce";
}

void allreduce_run(OpContext& ctx, AllreduceAlgo algo, const void* send, void* recv, std::size_t count, DType dtype,
                   ReduceOp op, const AllreduceOptions& o) {
  switch (algo) {
    case AllreduceAlgo::ring: ring_allreduce_run(ctx, send, recv, count, dtype, op, o.segment_bytes, o.window); return;
    case AllreduceAlgo::tree: tree_allreduce_run(ctx, send, recv, count, dtype, op, o.segment_bytes, o.window); return;
    case AllreduceAlgo::rhd: rhd_allreduce_run(ctx, send, recv, count, dtype, op); return;
    case AllreduceAlgo::shm:  // runs on a channel: shm_allreduce_run
    case AllreduceAlgo::automatic: break;
  }
  FTCC_CHECK(false) << "allreduce_run needs a resolved point-to-point algorithm";
}

void channel_allreduce_run(OpContext& ctx, ShmSegment::Channel& channel, const void* send, void* recv,
                           std::size_t count, DType dtype, ReduceOp op, const AllreduceOptions& options) {
  if (channel.hosts() > 1)
    hierarchical_allreduce_run(ctx, channel, send, recv, count, dtype, op, options);
  else
    shm_allreduce_run(ctx, channel, send, recv, count, dtype, op);
}

const char* channel_allreduce_name(const ShmSegment::Channel& channel) {
  return channel.hosts() > 1 ? "hierarchical_allreduce" : "shm_allreduce";
}

ShmSegment::Channel* shm_channel(Communicator& comm, AllreduceAlgo requested, int channel) {
  if (!allreduce_wants_shm(requested)) return nullptr;
  ShmSegment* s = comm.shared_memory();
  return s ? &s->channel(channel) : nullptr;
}

}  // namespace detail

AllreduceAlgo detail::one_host_auto(AllreduceAlgo requested, std::size_t bytes, int ranks) {
  if (requested != AllreduceAlgo::automatic || env_algo() != AllreduceAlgo::automatic) return AllreduceAlgo::shm;
  return select_one_host_allreduce(bytes, ranks, online_cpus());
}

void allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DType dtype, ReduceOp op,
               const AllreduceOptions& o) {
  const std::size_t bytes = count * dtype_size(dtype);
  detail::ShmSegment::Channel* ch = detail::shm_channel(comm, o.algo, 0);
  AllreduceAlgo algo = AllreduceAlgo::shm;
  if (ch && ch->hosts() == 1) {
    // One host: auto weighs shared memory against point-to-point (select_one_host_allreduce).
    algo = detail::one_host_auto(o.algo, bytes, comm.size());
    if (algo != AllreduceAlgo::shm) ch = nullptr;
  } else if (!ch) {
    algo = resolve_allreduce_algo(o.algo, bytes, comm.size());
  }
  OpContext ctx(comm, ch ? detail::channel_allreduce_name(*ch) : detail::allreduce_op_name(algo), o.timeout_s,
                collective_key("allreduce", count, static_cast<int>(dtype), static_cast<int>(op)));
  detail::with_host_buffers(send, bytes, recv, send && send != recv ? 0 : bytes, bytes, [&](const void* s, void* r) {
    if (ch)
      detail::channel_allreduce_run(ctx, *ch, s ? s : r, r, count, dtype, op, o);
    else
      detail::allreduce_run(ctx, algo, s ? s : r, r, count, dtype, op, o);
  });
}

}  // namespace ftcc::comm
