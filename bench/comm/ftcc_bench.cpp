// ftcc-bench: ftcc's collectives against the MPI library's own, in the nccl-tests spirit.
//
//   tools/ftcc-run -n 4 build/bench/comm/ftcc-bench --op allreduce --algo all -b 8 -e 256M -f 4 -c 1
//
// For each size (bytes of the whole buffer, as nccl-tests counts them) and algorithm:
//   1. check (-c 1): one call on inputs every rank can predict, every element compared; #wrong is
//      the count of wrong elements summed over ranks;
//   2. warmup (-w) calls, then -n timed calls, each after an (untimed) MPI_Barrier; rank 0 decides
//      the count (--min-time-s may raise it for small sizes) and broadcasts it, so all ranks agree;
//      the algorithms of one size are interleaved call by call (see Bench::time_us);
//   3. time_us = median over iterations of the slowest rank's time for that iteration;
//      algbw = bytes / time; busbw = algbw x factor (allreduce 2(n-1)/n, reduce_scatter,
//      allgather, gather, scatter and alltoall (n-1)/n, broadcast and reduce 1), the nccl-tests
//      convention;
//   4. vs_mpi = MPI's time / ours at the same size in the same run (> 1: ftcc is faster).
// Algorithms: mpi (the MPI library's own), ftcc's by name, auto (ftcc's choice: shared memory on
// one host, hierarchical on several), p2p (ftcc's choice without shared memory: a second
// communicator set up with FTCC_SHM=0), copy (allreduce only: a memcpy of the buffer on every rank
// at once, the memory bound). Sizes are the whole buffer: for gather, scatter and alltoall the
// root's (or each rank's) n blocks.
// Inputs: rank r, element i: (r+1)(i mod 17 + 1) (sums exact in every dtype for the rank counts
// used here); for prod 1 + (r+i) mod 2. Only rank 0 prints.
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "ftcc/recovery/job_outcome.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/mpi_types.hpp"
#include "ftcc/comm/shm_segment.hpp"

namespace {

using namespace ftcc::comm;

struct Config {
  std::string op = "allreduce";
  std::string algo = "all";
  std::string min_bytes = "8", max_bytes = "64M";
  double factor = 2;
  int iters = 20, warmup = 5;
  double min_time_s = 0;
  std::string dtype = "f32", redop = "sum";
  int check = 1;
  std::string json;
  std::size_t segment_bytes = 0;
  int window = 0;
  double timeout_s = 0;
  int root = 0;
};

std::size_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  const double v = std::stod(s, &pos);
  std::size_t mult = 1;
  if (pos < s.size()) {
    switch (s[pos]) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: throw CLI::ValidationError("size", "bad size suffix in '" + s + "' (K, M, G)");
    }
  }
  return static_cast<std::size_t>(v * static_cast<double>(mult));
}

double input(ReduceOp op, int rank, std::size_t i) {
  if (op == ReduceOp::prod) return 1.0 + static_cast<double>((static_cast<std::size_t>(rank) + i) % 2);
  return (rank + 1.0) * static_cast<double>(i % 17 + 1);
}

double expected_reduction(ReduceOp op, int n, std::size_t i) {
  double acc = input(op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = input(op, r, i);
    switch (op) {
      case ReduceOp::sum: acc += v; break;
      case ReduceOp::prod: acc *= v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
      case ReduceOp::band:
      case ReduceOp::bor:
      case ReduceOp::bxor:
        throw ftcc::InvalidArgument(std::string("ftcc-bench: op ") + to_string(op) + " is not benchmarked");
    }
  }
  return acc;
}

template <class F>
void for_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::i32: f(std::int32_t{}); break;
    case DType::i64: f(std::int64_t{}); break;
    case DType::u8: case DType::f16: case DType::bf16: case DType::i8: case DType::i16:
    case DType::boolean:  // refused by --dtype's check
      throw ftcc::InvalidArgument(std::string("ftcc-bench: dtype ") + to_string(t) + " is not benchmarked");
  }
}

void fill(void* buf, std::size_t count, std::size_t first, DType t, ReduceOp op, int rank) {
  for_type(t, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(buf);
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(input(op, rank, first + i));
  });
}

// Elements of buf[0..count) that differ from want(first + i).
template <class Want>
std::uint64_t count_wrong(const void* buf, std::size_t count, DType t, Want want) {
  std::uint64_t wrong = 0;
  for_type(t, [&](auto zero) {
    using T = decltype(zero);
    const T* p = static_cast<const T*>(buf);
    for (std::size_t i = 0; i < count; ++i)
      if (p[i] != static_cast<T>(want(i))) ++wrong;
  });
  return wrong;
}

struct Bench {
  Config cfg;
  Communicator comm;
  int rank, n;
  DType dt;
  ReduceOp rop;
  Communicator p2p;  // no shared memory (FTCC_SHM=0 while it attached)
  std::vector<std::byte> sendbuf, recvbuf;
  std::vector<std::size_t> a2a_counts, a2a_displs;  // alltoall: the same block to every rank

  explicit Bench(const Config& c)
      : cfg(c), comm(Communicator::duplicate(MPI_COMM_WORLD)), rank(comm.rank()), n(comm.size()),
        dt(parse_dtype(c.dtype)), rop(parse_op(c.redop)), p2p(Communicator::duplicate(MPI_COMM_WORLD)) {
    if (cfg.timeout_s > 0) {
      comm.set_timeout_s(cfg.timeout_s);
      p2p.set_timeout_s(cfg.timeout_s);
    }
    if (cfg.root < 0 || cfg.root >= n)
      throw ftcc::InvalidArgument("ftcc-bench: --root " + std::to_string(cfg.root) + " is not a rank of " + std::to_string(n));
    // The segment attaches at a communicator's first collective, reading FTCC_SHM then (the user's
    // setting is restored for `comm`).
    // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs yet
    const char* was = std::getenv("FTCC_SHM");
    const std::string saved = was ? was : "";
    setenv("FTCC_SHM", "0", 1);  // NOLINT(concurrency-mt-unsafe)
    barrier(p2p);
    if (was)
      setenv("FTCC_SHM", saved.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    else
      unsetenv("FTCC_SHM");  // NOLINT(concurrency-mt-unsafe)
  }

  // Element counts of the send and receive buffers for a size in bytes.
  std::pair<std::size_t, std::size_t> counts(std::size_t bytes) const {
    const std::size_t esz = dtype_size(dt), total = bytes / esz, per = total / static_cast<std::size_t>(n);
    if (cfg.op == "reduce_scatter" || cfg.op == "scatter") return {per * n, per};
    if (cfg.op == "allgather" || cfg.op == "gather") return {per, per * n};
    if (cfg.op == "alltoall") return {per * n, per * n};
    return {total, total};
  }

  double bus_factor() const {
    if (cfg.op == "allreduce") return 2.0 * (n - 1) / n;
    if (cfg.op == "broadcast" || cfg.op == "reduce") return 1.0;
    return static_cast<double>(n - 1) / n;
  }

  // What `algo` ran as, for the table: auto(shm) on one host, auto(hier) on several.
  std::string label(const std::string& algo, std::size_t bytes) {
    if (algo == "shm" && comm.uses_shared_memory() && comm.shared_memory()->hosts() > 1) return "shm(hier)";
    if (algo != "auto") return algo;
    if (cfg.op == "allreduce" && !(comm.uses_shared_memory() && allreduce_wants_shm(AllreduceAlgo::automatic)))
      return "auto(" + std::string(to_string(resolve_allreduce_algo(AllreduceAlgo::automatic, bytes, n))) + ")";
    if (cfg.op == "allreduce" && comm.shared_memory()->hosts() == 1 && !std::getenv("FTCC_ALLREDUCE_ALGO")) {
      const auto pick = select_one_host_allreduce(bytes, n, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
      if (pick != AllreduceAlgo::shm) return "auto(" + std::string(to_string(pick)) + ")";
    }
    if (!comm.uses_shared_memory() || (cfg.op == "alltoall" && comm.shared_memory()->hosts() > 1)) return "auto";
    // alltoallv: the counts through shared memory, the data too up to 64 KiB per rank
    if (cfg.op == "alltoall" && bytes / static_cast<std::size_t>(n) * static_cast<std::size_t>(n - 1) > kShmAlltoallBytes)
      return "auto(shm+p2p)";
    return comm.shared_memory()->hosts() > 1 ? "auto(hier)" : "auto(shm)";
  }

  // One call of `algo` on the current buffers.
  void run(const std::string& algo, std::size_t scount, std::size_t rcount) {
    void* s = sendbuf.data();
    void* r = recvbuf.data();
    const int ic = static_cast<int>(rcount);
    if (algo == "copy") {  // the memory bound: every rank copies the buffer at once (STREAM's copy)
      std::memcpy(r, s, rcount * dtype_size(dt));
      return;
    }
    const bool mpi = algo == "mpi";
    Communicator& c = algo == "p2p" ? p2p : comm;
    const MPI_Datatype t = mpi_datatype(dt);
    if (cfg.op == "reduce") {
      if (mpi) return check_mpi(MPI_Reduce(s, r, ic, t, mpi_op(rop), cfg.root, comm.raw()));
      return reduce(c, s, r, scount, dt, rop, cfg.root, options());
    }
    if (cfg.op == "gather") {
      if (mpi) return check_mpi(MPI_Gather(s, static_cast<int>(scount), t, r, static_cast<int>(scount), t, cfg.root, comm.raw()));
      return gather(c, s, r, scount, dt, cfg.root, options());
    }
    if (cfg.op == "scatter") {
      if (mpi) return check_mpi(MPI_Scatter(s, ic, t, r, ic, t, cfg.root, comm.raw()));
      return scatter(c, s, r, rcount, dt, cfg.root, options());
    }
    if (cfg.op == "alltoall") {
      const int per = static_cast<int>(rcount / static_cast<std::size_t>(n));
      if (mpi) return check_mpi(MPI_Alltoall(s, per, t, r, per, t, comm.raw()));
      return alltoallv(c, s, a2a_counts.data(), a2a_displs.data(), r, a2a_counts.data(), a2a_displs.data(), dt, options());
    }
    if (algo == "p2p") {  // the other ops: ftcc's choice, on the communicator without shared memory
      if (cfg.op == "allreduce") return allreduce(c, s, r, scount, dt, rop, AllreduceOptions{});
      if (cfg.op == "broadcast") return broadcast(c, r, rcount, dt, cfg.root);
      if (cfg.op == "reduce_scatter") return reduce_scatter(c, s, r, rcount, dt, rop, options());
      return allgather(c, s, r, scount, dt, options());
    }
    if (cfg.op == "allreduce") {
      if (algo == "mpi") {
        check_mpi(MPI_Allreduce(s, r, ic, mpi_datatype(dt), mpi_op(rop), comm.raw()));
        return;
      }
      AllreduceOptions o;
      o.algo = parse_allreduce_algo(algo);
      o.segment_bytes = cfg.segment_bytes;
      o.window = cfg.window;
      allreduce(comm, s, r, scount, dt, rop, o);
    } else if (cfg.op == "broadcast") {
      if (algo == "mpi") {
        check_mpi(MPI_Bcast(r, ic, mpi_datatype(dt), cfg.root, comm.raw()));
        return;
      }
      BroadcastOptions o;
      o.algo = algo == "binomial" ? BroadcastAlgo::binomial
               : algo == "chain"  ? BroadcastAlgo::chain
                                  : BroadcastAlgo::automatic;
      o.segment_bytes = cfg.segment_bytes;
      o.window = cfg.window;
      broadcast(comm, r, rcount, dt, cfg.root, o);
    } else if (cfg.op == "reduce_scatter") {
      if (algo == "mpi") {
        check_mpi(MPI_Reduce_scatter_block(s, r, ic, mpi_datatype(dt), mpi_op(rop), comm.raw()));
        return;
      }
      reduce_scatter(comm, s, r, rcount, dt, rop, options());
    } else if (cfg.op == "allgather") {
      if (algo == "mpi") {
        const MPI_Datatype t = mpi_datatype(dt);
        check_mpi(MPI_Allgather(s, static_cast<int>(scount), t, r, static_cast<int>(scount), t, comm.raw()));
        return;
      }
      allgather(comm, s, r, scount, dt, options());
    }
  }

  CollectiveOptions options() const {
    CollectiveOptions o;
    o.segment_bytes = cfg.segment_bytes;
    o.window = cfg.window;
    return o;
  }

  static void check_mpi(int rc) {
    if (rc != MPI_SUCCESS) throw CommError("MPI baseline", "MPI error " + std::to_string(rc));
  }

  void prepare(std::size_t scount, std::size_t rcount) {
    const std::size_t esz = dtype_size(dt);
    sendbuf.assign(std::max<std::size_t>(scount, 1) * esz, std::byte{0});
    recvbuf.assign(std::max<std::size_t>(rcount, 1) * esz, std::byte{0});
    const std::size_t per = rcount / static_cast<std::size_t>(n);
    a2a_counts.assign(static_cast<std::size_t>(n), per);
    a2a_displs.resize(a2a_counts.size());
    for (std::size_t p = 0; p < a2a_displs.size(); ++p) a2a_displs[p] = p * per;
    if (cfg.op == "broadcast") {
      if (rank == cfg.root) fill(recvbuf.data(), rcount, 0, dt, rop, 0);
    } else if (cfg.op == "scatter") {
      if (rank == cfg.root) fill(sendbuf.data(), scount, 0, dt, rop, 0);
    } else if (cfg.op == "allgather" || cfg.op == "gather") {
      fill(sendbuf.data(), scount, static_cast<std::size_t>(rank) * scount, dt, rop, rank);
    } else {
      fill(sendbuf.data(), scount, 0, dt, rop, rank);
    }
  }

  std::uint64_t verify(const std::string& algo, std::size_t scount, std::size_t rcount) {
    prepare(scount, rcount);
    run(algo, scount, rcount);
    std::uint64_t wrong = 0;
    if (cfg.op == "allreduce")
      wrong = count_wrong(recvbuf.data(), rcount, dt, [&](std::size_t i) { return expected_reduction(rop, n, i); });
    else if (cfg.op == "broadcast")
      wrong = count_wrong(recvbuf.data(), rcount, dt, [&](std::size_t i) { return input(rop, 0, i); });
    else if (cfg.op == "reduce")
      wrong = rank != cfg.root ? 0 : count_wrong(recvbuf.data(), rcount, dt, [&](std::size_t i) { return expected_reduction(rop, n, i); });
    else if (cfg.op == "scatter")
      wrong = count_wrong(recvbuf.data(), rcount, dt, [&](std::size_t i) { return input(rop, 0, static_cast<std::size_t>(rank) * rcount + i); });
    else if (cfg.op == "alltoall")
      wrong = count_wrong(recvbuf.data(), rcount, dt, [&](std::size_t i) {  // block p: rank p's block for me
        const std::size_t per = std::max<std::size_t>(rcount / static_cast<std::size_t>(n), 1);
        return input(rop, static_cast<int>(i / per), static_cast<std::size_t>(rank) * per + i % per);
      });
    else if (cfg.op == "gather" && rank != cfg.root)
      wrong = 0;
    else if (cfg.op == "reduce_scatter")
      wrong = count_wrong(recvbuf.data(), rcount, dt, [&](std::size_t i) {
        return expected_reduction(rop, n, static_cast<std::size_t>(rank) * rcount + i);
      });
    else
      wrong = count_wrong(recvbuf.data(), rcount, dt, [&](std::size_t i) {
        const std::size_t per = rcount / static_cast<std::size_t>(n);
        const int owner = static_cast<int>(i / std::max<std::size_t>(per, 1));
        return input(rop, owner, i);
      });
    std::uint64_t total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_UINT64_T, MPI_SUM, comm.raw());
    return total;
  }

  // Times every algorithm of `algos` at one size, interleaved: each iteration runs each algorithm
  // once (after an untimed barrier), so a burst of load from elsewhere on a shared machine hits
  // all of them alike and the ratios stay meaningful. Returns, per algorithm, the median over
  // iterations of the slowest rank's time, in microseconds.
  std::vector<double> time_us(const std::vector<std::string>& algos, std::size_t scount, std::size_t rcount) {
    prepare(scount, rcount);
    auto one = [&](const std::string& algo) {
      MPI_Barrier(comm.raw());
      const double t0 = MPI_Wtime();
      run(algo, scount, rcount);
      return MPI_Wtime() - t0;
    };
    double warm = 0;
    for (int i = 0; i < cfg.warmup; ++i)
      for (const auto& a : algos) warm += one(a);
    int iters = cfg.iters;
    if (rank == 0 && cfg.min_time_s > 0 && cfg.warmup > 0) {
      const double per_round = std::max(warm / cfg.warmup, 1e-7);
      iters = std::clamp(static_cast<int>(cfg.min_time_s / per_round), cfg.iters, 100000);
    }
    MPI_Bcast(&iters, 1, MPI_INT, 0, comm.raw());  // every rank runs the same count
    const std::size_t na = algos.size(), ni = static_cast<std::size_t>(iters);
    std::vector<double> mine(na * ni), worst(na * ni);
    for (std::size_t i = 0; i < ni; ++i)
      for (std::size_t a = 0; a < na; ++a) mine[a * ni + i] = one(algos[a]);
    MPI_Allreduce(mine.data(), worst.data(), static_cast<int>(worst.size()), MPI_DOUBLE, MPI_MAX, comm.raw());
    std::vector<double> med(na);
    for (std::size_t a = 0; a < na; ++a) {
      auto first = worst.begin() + static_cast<std::ptrdiff_t>(a * ni);
      std::sort(first, first + static_cast<std::ptrdiff_t>(ni));
      const std::size_t h = ni / 2;
      med[a] = (ni % 2 ? first[h] : 0.5 * (first[h - 1] + first[h])) * 1e6;
    }
    return med;
  }
};

std::vector<std::string> algos_for(const std::string& op, const std::string& algo) {
  if (algo != "all") {  // one name, or several separated by commas
    std::vector<std::string> names;
    std::size_t from = 0;
    for (std::size_t comma; (comma = algo.find(',', from)) != std::string::npos; from = comma + 1)
      names.push_back(algo.substr(from, comma - from));
    names.push_back(algo.substr(from));
    return names;
  }
  if (op == "allreduce") return {"mpi", "ring", "tree", "rhd", "shm", "auto", "copy"};
  if (op == "broadcast") return {"mpi", "binomial", "chain", "auto"};
  return {"mpi", "p2p", "auto"};  // the others: ftcc's choice, without and with shared memory
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {  // every rank is up: tools/ftcc-run's start-up deadline is met
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ftcc::recovery::job_record::formed(size);
  }

  Config cfg;
  CLI::App app{"ftcc-bench: ftcc collectives vs the MPI library's own (run under tools/ftcc-run)"};
  app.add_option("--op", cfg.op, "collective")
      ->check(CLI::IsMember({"allreduce", "broadcast", "reduce_scatter", "allgather", "reduce", "gather", "scatter",
                             "alltoall"}));
  app.add_option("--algo", cfg.algo,
                 "allreduce: ring|tree|rhd|shm|auto|mpi|copy|all (copy: a memcpy of the buffer on every rank at "
                 "once, the memory bound; its busbw is the copy's GB/s); broadcast: binomial|chain|auto|mpi|all; "
                 "the others: auto|p2p|mpi|all (auto: ftcc's choice, through shared memory where ranks share a "
                 "host; p2p: ftcc's choice without shared memory); or several, separated by commas (ring,shm); "
                 "p2p works for every op");
  app.add_option("-b,--min-bytes", cfg.min_bytes, "smallest size (K, M, G suffixes)");
  app.add_option("-e,--max-bytes", cfg.max_bytes, "largest size");
  app.add_option("-f,--step-factor", cfg.factor, "size multiplier between rows")->check(CLI::Range(1.01, 1e9));
  app.add_option("-n,--iters", cfg.iters, "timed iterations per size and algorithm")->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup", cfg.warmup, "untimed iterations first")->check(CLI::NonNegativeNumber);
  app.add_option("--min-time-s", cfg.min_time_s, "raise the iteration count until a size takes this long");
  app.add_option("-d,--dtype", cfg.dtype, "f32|f64|i32|i64")
      ->check(CLI::IsMember({"f32", "f64", "i32", "i64", "float32", "float64", "int32", "int64"}));
  app.add_option("-o,--redop", cfg.redop, "sum|prod|min|max");
  app.add_option("-c,--check", cfg.check, "verify each algorithm before timing: -c, -c 1 (default) or -c 0")
      ->expected(0, 1)
      ->default_str("1");
  app.add_option("--json", cfg.json, "also write the results as JSON to this path (rank 0)");
  app.add_option("--segment-bytes", cfg.segment_bytes, "ftcc pipeline segment size (0: default)");
  app.add_option("--window", cfg.window, "ftcc segments in flight (0: default)");
  app.add_option("--timeout-s", cfg.timeout_s, "ftcc deadline per call (0: default)");
  app.add_option("--root", cfg.root, "root of broadcast, reduce, gather and scatter");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
    MPI_Finalize();
    return rc;
  }

  int status = 0;
  try {
    Bench b(cfg);
    const auto algos = algos_for(cfg.op, cfg.algo);
    const std::size_t lo = parse_size(cfg.min_bytes), hi = parse_size(cfg.max_bytes);
    const bool compare = std::find(algos.begin(), algos.end(), "mpi") != algos.end() && algos.size() > 1;
    if (rank == 0) {
      std::printf("# ftcc-bench: op %s, dtype %s, redop %s, %d ranks, iters %d (warmup %d%s), check %s\n",
                  cfg.op.c_str(), cfg.dtype.c_str(), cfg.redop.c_str(), b.n, cfg.iters, cfg.warmup,
                  cfg.min_time_s > 0 ? ", raised to fill --min-time-s" : "", cfg.check ? "on" : "off");
      std::printf("# time_us: median over iterations of the slowest rank; busbw factor %.3f%s\n", b.bus_factor(),
                  compare ? "; vs_mpi = time(mpi) / time(algo)" : "");
      std::printf("%12s %12s %5s %-12s %11s %11s %11s %7s %7s\n", "bytes", "count", "type", "algo", "time_us",
                  "algbw_GB/s", "busbw_GB/s", "#wrong", compare ? "vs_mpi" : "");
      std::fflush(stdout);
    }
    nlohmann::json results = nlohmann::json::array();
    std::uint64_t total_wrong = 0;
    double busbw_sum = 0;
    int rows = 0;
    for (double size = static_cast<double>(lo); size <= static_cast<double>(hi) * 1.0000001; size *= cfg.factor) {
      const std::size_t bytes_req = static_cast<std::size_t>(size);
      const auto [scount, rcount] = b.counts(bytes_req);
      const std::size_t elems = cfg.op == "allgather" || cfg.op == "gather" ? rcount : scount;
      const std::size_t bytes = elems * dtype_size(b.dt);
      std::vector<std::uint64_t> wrongs(algos.size(), 0);
      if (cfg.check)
        for (std::size_t a = 0; a < algos.size(); ++a) wrongs[a] = algos[a] == "copy" ? 0 : b.verify(algos[a], scount, rcount);
      const std::vector<double> times = b.time_us(algos, scount, rcount);
      double mpi_us = 0;
      for (std::size_t a = 0; a < algos.size(); ++a)
        if (algos[a] == "mpi") mpi_us = times[a];
      for (std::size_t a = 0; a < algos.size(); ++a) {
        const std::string& algo = algos[a];
        const std::uint64_t wrong = wrongs[a];
        total_wrong += wrong;
        const double us = times[a];
        const double algbw = us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0;
        const double busbw = algo == "copy" ? algbw : algbw * b.bus_factor();
        const std::string label = b.label(algo, bytes);
        if (algo != "mpi" && algo != "copy") {
          busbw_sum += busbw;
          ++rows;
        }
        if (rank == 0) {
          char ratio[32] = "";
          if (compare && algo != "mpi" && algo != "copy" && us > 0) std::snprintf(ratio, sizeof ratio, "%.2f", mpi_us / us);
          std::printf("%12zu %12zu %5s %-12s %11.1f %11.3f %11.3f %7llu %7s\n", bytes, elems, cfg.dtype.c_str(),
                      label.c_str(), us, algbw, busbw, static_cast<unsigned long long>(wrong), ratio);
          std::fflush(stdout);
          nlohmann::json row = {{"bytes", bytes},   {"count", elems}, {"dtype", cfg.dtype}, {"algo", algo},
                                {"label", label},   {"time_us", us},  {"algbw_GBps", algbw}, {"busbw_GBps", busbw},
                                {"wrong", wrong}};
          if (compare && algo != "mpi" && algo != "copy" && us > 0) row["vs_mpi"] = mpi_us / us;
          results.push_back(row);
        }
      }
      if (bytes_req == 0) break;
    }
    if (rank == 0) {
      std::printf("# total #wrong: %llu   average ftcc busbw: %.3f GB/s\n",
                  static_cast<unsigned long long>(total_wrong), rows ? busbw_sum / rows : 0.0);
      if (!cfg.json.empty()) {
        nlohmann::json doc = {{"op", cfg.op},      {"dtype", cfg.dtype}, {"redop", cfg.redop},
                              {"ranks", b.n},      {"iters", cfg.iters}, {"warmup", cfg.warmup},
                              {"results", results}};
        std::ofstream(cfg.json) << doc.dump(1) << "\n";
      }
    }
    if (total_wrong) status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] ftcc-bench: %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
