// ftcc-recovery-bench: how long from a SIGKILL to survivors working again, one trial per run.
//
//   --mode bare   the ULFM baseline: MPI_Allreduce loop, on error MPIX_Comm_revoke + shrink,
//                 nothing else. Reports kill -> shrunk communicator.
//   --mode ftcc   ResilientGroup + our allreduce (ring, --count floats), the victim killed by the
//                 fault injector. Reports kill -> new group installed (group_ms), the recovery
//                 event's breakdown, and kill -> first step completed on the new group (total_ms).
//   --mode hang   as ftcc, but the victim SIGSTOPs itself; detection needs --hang-timeout-ms.
//
// The victim writes its wall-clock time just before dying; survivors are on the same host, so
// the differences are meaningful. The lowest surviving rank prints one JSON line:
//   RECOVERY_BENCH {"mode":..., "ranks":..., "group_ms":..., "total_ms":..., ...}
// bench/recovery/run runs many trials and reports medians.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/fault_injector.hpp"
#include "ftcc/recovery/resilient_group.hpp"

namespace fc = ftcc::comm;
namespace fr = ftcc::recovery;

namespace {

std::int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int bare(int victim, int kill_step, int steps, const std::string& dir) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int n0 = size;
  const int world_rank = rank;
  std::int64_t shrunk_ns = -1;
  for (int step = 0; step < steps; ++step) {
    if (world_rank == victim && step == kill_step) {
      std::ofstream(dir + "/fault-" + std::to_string(victim) + ".ns") << wall_ns() << "\n";
      std::raise(SIGKILL);
    }
    int one = 1, sum = 0;
    if (MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm) != MPI_SUCCESS) {
      fc::revoke(comm);
      MPI_Comm s = fc::shrink(comm);
      shrunk_ns = wall_ns();
      MPI_Comm_free(&comm);
      comm = s;
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &size);
      --step;
    }
  }
  if (rank == 0) {
    auto t = fr::FaultInjector::read_fault_time_ns(dir, victim);
    nlohmann::json j{{"mode", "bare"}, {"ranks", n0}, {"victim", victim},
                     {"group_ms", t && shrunk_ns > 0 ? (shrunk_ns - *t) / 1e6 : -1.0}};
    std::printf("RECOVERY_BENCH %s\n", j.dump().c_str());
  }
  MPI_Comm_free(&comm);
  return 0;
}

int with_ftcc(const std::string& mode, int victim, int kill_step, int steps, std::size_t count, int hang_timeout_ms) {
  fr::GroupOptions opt;
  opt.verbose = false;
  opt.hang_timeout = std::chrono::milliseconds(mode == "hang" ? hang_timeout_ms : 0);
  const std::string spec = (mode == "hang" ? "hang:rank=" : "kill:rank=") + std::to_string(victim) +
                           ":step=" + std::to_string(kill_step);
  opt.faults = fr::parse_fault_specs({spec});
  fr::ResilientGroup g(MPI_COMM_WORLD, opt);
  const int n0 = g.size();
  std::vector<float> grad(count, 1.0f);
  std::int64_t first_step_after_ns = -1;
  for (int step = 0; step < steps; ++step) {
    g.begin_step(step);
    const std::size_t recoveries_before = g.events().size();
    g.run(step, [&](fc::Communicator& c) {
      fc::AllreduceOptions ao;
      fc::allreduce(c, fc::kInPlace, grad.data(), grad.size(), fc::DType::f32, fc::ReduceOp::sum, ao);
    });
    if (g.events().size() > recoveries_before && first_step_after_ns < 0) first_step_after_ns = wall_ns();
    std::fill(grad.begin(), grad.end(), 1.0f);
    g.set_committed_step(step);
  }
  if (g.rank() == 0 && !g.events().empty()) {
    const auto& e = g.events().front();
    auto t = fr::FaultInjector::read_fault_time_ns(g.event_dir(), victim);
    nlohmann::json j = e.to_json();
    j["mode"] = mode;
    j["ranks"] = n0;
    j["victim"] = victim;
    // kill -> new group installed = total_ms minus the (empty) hooks; kill -> first step done.
    j["group_ms"] = e.total_ms - e.resync_ms;
    j["first_step_ms"] = t && first_step_after_ns > 0 ? (first_step_after_ns - *t) / 1e6 : -1.0;
    std::printf("RECOVERY_BENCH %s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftcc-recovery-bench: time from a rank's death to the survivors working again (one trial)"};
  std::string mode = "ftcc";
  int victim = 1, kill_step = 20, steps = 40, hang_timeout_ms = 1000;
  std::size_t count = 1 << 18;
  app.add_option("--mode", mode, "bare | ftcc | hang")->check(CLI::IsMember({"bare", "ftcc", "hang"}));
  app.add_option("--victim", victim, "rank that dies");
  app.add_option("--kill-step", kill_step, "step at which it dies");
  app.add_option("--steps", steps, "steps in all");
  app.add_option("--count", count, "floats allreduced per step (ftcc/hang modes)");
  app.add_option("--hang-timeout-ms", hang_timeout_ms, "heartbeat timeout (hang mode)");
  CLI11_PARSE(app, argc, argv);
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    if (mode == "bare") {
      char dir[] = "/tmp/ftcc-rbench-XXXXXX";
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      std::string d;
      if (rank == 0) d = mkdtemp(dir);
      char buf[64] = {0};
      std::snprintf(buf, sizeof buf, "%s", d.c_str());
      MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);  // set-up only, before any failure
      rc = bare(victim, kill_step, steps, buf);
    } else {
      rc = with_ftcc(mode, victim, kill_step, steps, count, hang_timeout_ms);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ftcc-recovery-bench: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
