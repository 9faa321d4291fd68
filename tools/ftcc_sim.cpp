// ftcc-sim: the deterministic simulation campaign of the recovery protocol
// (recovery/simulation/sim_campaign.hpp; docs/recovery.md, "Simulation").
//
//   ftcc-sim --runs 10000              # seeds 1 .. 10000, every core
//   ftcc-sim --seed 4242 --verbose     # replay one seed: its schedule, outcome and trace
//
// Exit status: 0 every schedule kept every invariant, 1 some did not (each failing seed is
// printed with the command that replays it), 2 bad flags.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ftcc/recovery/simulation/sim_campaign.hpp"

namespace sim = ftcc::recovery::sim;

namespace {

struct Totals {
  std::uint64_t runs = 0, passed = 0, faults = 0, recoveries = 0;
  std::uint64_t respawn_jobs = 0, spawned = 0, joined_new = 0, turned_away = 0;
  std::map<int, std::uint64_t> statuses;
  std::set<std::uint64_t> traces;
  std::set<sim::SimWorld::Cell> cells;
  std::vector<sim::RunReport> failures;  // lowest seeds first, a few kept
  std::vector<std::uint64_t> failed_seeds;  // all of them (the first 100 printed)
};

void print_report(const sim::RunReport& r, bool verbose) {
  std::printf("%s", r.schedule.describe().c_str());
  if (verbose) std::printf("%s  trace %016llx\n", r.outcome.c_str(), static_cast<unsigned long long>(r.trace));
  for (const auto& v : r.violations) std::printf("  VIOLATION: %s\n", v.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftcc-sim: run the recovery protocol in simulated jobs under seeded schedules of faults and check its invariants"};
  std::uint64_t seed = 1;
  std::uint64_t runs = 1;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  bool verbose = false;
  app.add_option("--seed", seed, "first seed (run i uses seed + i)")->capture_default_str();
  app.add_option("--runs", runs, "schedules to run")->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))->capture_default_str();
  app.add_option("--jobs", jobs, "schedules run at once (threads)")->check(CLI::Range(1u, 256u))->capture_default_str();
  app.add_flag("--verbose", verbose, "print every schedule, its outcome per process and its trace");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // The simulated jobs write no job records, whatever launched this program.
  unsetenv("FTCC_JOB_DIR");  // NOLINT(concurrency-mt-unsafe): before any thread starts

  Totals t;
  std::mutex mu;
  std::atomic<std::uint64_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (;;) {
      const std::uint64_t i = next.fetch_add(1);
      if (i >= runs) return;
      const sim::RunReport r = sim::run_schedule(sim::schedule_of(seed + i));
      std::lock_guard<std::mutex> lock(mu);
      ++t.runs;
      t.faults += r.reached.size();
      t.recoveries += static_cast<std::uint64_t>(r.recoveries);
      t.respawn_jobs += r.spawned > 0 ? 1 : 0;
      t.spawned += static_cast<std::uint64_t>(r.spawned);
      t.joined_new += static_cast<std::uint64_t>(r.joined_new);
      t.turned_away += static_cast<std::uint64_t>(r.turned_away);
      t.traces.insert(r.trace);
      for (const auto& c : r.reached) t.cells.insert(c);
      if (verbose) print_report(r, true);
      if (r.violations.empty()) {
        ++t.passed;
        ++t.statuses[static_cast<int>(r.status)];
      } else {
        t.failed_seeds.push_back(r.schedule.seed);
        t.failures.push_back(r);
        std::sort(t.failures.begin(), t.failures.end(),
                  [](const auto& a, const auto& b) { return a.schedule.seed < b.schedule.seed; });
        if (t.failures.size() > 5) t.failures.pop_back();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned j = 1; j < std::min<std::uint64_t>(jobs, runs); ++j) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::uint64_t failed = t.runs - t.passed;
  const int total_cells = static_cast<int>(sim::Call::kCount) * static_cast<int>(sim::FaultKind::kCount) *
                          static_cast<int>(sim::FaultWhen::kCount);
  std::printf("ftcc-sim: %llu schedule(s) from seed %llu in %.1f s (%u at once): %llu passed, %llu failed\n",
              static_cast<unsigned long long>(t.runs), static_cast<unsigned long long>(seed), secs, jobs,
              static_cast<unsigned long long>(t.passed), static_cast<unsigned long long>(failed));
  std::printf("  faults fired %llu; (call x fault kind x phase) cells reached %zu of %d; distinct traces %zu; "
              "recoveries %llu\n",
              static_cast<unsigned long long>(t.faults), t.cells.size(), total_cells, t.traces.size(),
              static_cast<unsigned long long>(t.recoveries));
  std::printf("  respawns: %llu job(s) started %llu new process(es); %llu joined, %llu turned away\n",
              static_cast<unsigned long long>(t.respawn_jobs), static_cast<unsigned long long>(t.spawned),
              static_cast<unsigned long long>(t.joined_new), static_cast<unsigned long long>(t.turned_away));
  std::printf("  exit status of the passing jobs:");
  for (const auto& [status, n] : t.statuses) std::printf(" %d: %llu", status, static_cast<unsigned long long>(n));
  std::printf("\n");
  if (verbose) {
    std::printf("  cells not reached:");
    for (int c = 0; c < static_cast<int>(sim::Call::kCount); ++c)
      for (int k = 0; k < static_cast<int>(sim::FaultKind::kCount); ++k)
        for (int w = 0; w < static_cast<int>(sim::FaultWhen::kCount); ++w)
          if (!t.cells.count({c, k, w}))
            std::printf(" %s/%s/%s", sim::to_string(static_cast<sim::Call>(c)), sim::to_string(static_cast<sim::FaultKind>(k)),
                        sim::to_string(static_cast<sim::FaultWhen>(w)));
    std::printf("\n");
  }
  if (!t.failed_seeds.empty()) {
    std::sort(t.failed_seeds.begin(), t.failed_seeds.end());
    std::printf("  failed seeds:");
    for (std::size_t i = 0; i < t.failed_seeds.size() && i < 100; ++i)
      std::printf(" %llu", static_cast<unsigned long long>(t.failed_seeds[i]));
    std::printf("%s\n", t.failed_seeds.size() > 100 ? " ..." : "");
  }
  for (const auto& r : t.failures) {
    std::printf("FAILED ");
    print_report(r, false);
    std::printf("  replay: %s --seed %llu --verbose\n", argv[0], static_cast<unsigned long long>(r.schedule.seed));
  }
  return failed == 0 ? 0 : 1;
}
