// ftcc-heartbeat-traffic: the heartbeat's own traffic per host, by calculation from the real
// topology (recovery/heartbeat_topology.hpp), not by measurement: for H hosts of R ranks it counts
// the datagrams each host's ranks send per period (off the host, and within it) and turns them
// into datagrams and bytes per second for a heartbeat period, next to all-to-all for comparison.
//
//   ftcc-heartbeat-traffic [--hosts 4,16,64] [--ranks-per-host 1,8] [--period-ms 125] [--fanout 2]
//
// Bytes per datagram: 40 (header) + 32 (HMAC) + 4 per listed suspect (none when healthy), plus
// 28 of IPv4 and UDP headers. Prints one markdown table.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "ftcc/recovery/heartbeat_topology.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ftcc-heartbeat-traffic: the heartbeat's traffic per host, calculated from its topology"};
  std::vector<int> hosts{4, 16, 64}, per_host{1, 8};
  double period_ms = 125;
  int fanout = 2;
  app.add_option("--hosts", hosts, "host counts")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--ranks-per-host", per_host, "ranks per host")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--period-ms", period_ms, "heartbeat period (ftcc's default: hang timeout / 8)")->check(CLI::PositiveNumber);
  app.add_option("--fanout", fanout, "hosts watched on either side of the ring")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  constexpr double kBytes = 40 + 32 + 28;
  const double per_s = 1000.0 / period_ms;
  std::printf("| hosts | ranks/host | off-host datagrams/s per host | off-host KB/s per host | on-host datagrams/s | all-to-all off-host KB/s per host |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int h : hosts)
    for (int r : per_host) {
      std::vector<ftcc::recovery::HeartbeatMember> live;
      for (int i = 0; i < h; ++i) {
        char id[16];
        std::snprintf(id, sizeof id, "h%d", i);
        for (int k = 0; k < r; ++k) live.push_back({i * r + k, id});
      }
      const int off = ftcc::recovery::remote_datagrams_per_period(live, "h0", fanout);
      int on = 0;
      for (int k = 0; k < r; ++k) {
        const auto l = ftcc::recovery::heartbeat_links(k, live, fanout);
        for (int to : l.send_to) on += to < r ? 1 : 0;  // host h0 holds ranks 0..r-1
      }
      const double all_to_all = static_cast<double>(r) * r * (h - 1);
      std::printf("| %d | %d | %.0f | %.1f | %.0f | %.1f |\n", h, r, off * per_s, off * per_s * kBytes / 1000, on * per_s,
                  all_to_all * per_s * kBytes / 1000);
    }
  return 0;
}
