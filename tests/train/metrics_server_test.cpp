// The metrics endpoint: Prometheus text on GET /metrics, 400/404/405 for the rest, and it keeps
// serving after hostile input.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <utility>
#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/train/metrics_server.hpp"

namespace ft = ftcc::train;
using boost::asio::ip::tcp;

namespace {

std::string exchange(std::uint16_t port, const std::string& request) {
  boost::asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  // The server may answer and close before it read everything we send (a 400 on a bad start
  // line, a header over the limit): write and shutdown errors are expected then.
  boost::system::error_code ec;
  boost::asio::write(s, boost::asio::buffer(request), ec);
  s.shutdown(tcp::socket::shutdown_send, ec);
  std::string out;
  char buf[4096];
  for (;;) {
    size_t n = s.read_some(boost::asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

TEST(MetricsServer, ServesPrometheusText) {
  ft::MetricsServer server("127.0.0.1", 0);
  ft::TrainingMetrics m;
  m.step = 42;
  m.world_size = 3;
  m.recoveries_total = 1;
  m.last_recovery_ms = 12.5;
  m.spares_waiting = 1;
  m.spares_joined_total = 2;
  m.last_state_transfer_bytes = 4096;
  m.replica_mismatches_total = 3;
  m.corrupt_ranks_excluded_total = 2;
  server.update(m);
  const auto r = exchange(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 200"), std::string::npos) << r;
  EXPECT_NE(r.find("text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("\nftcc_step 42\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nftcc_world_size 3\n"), std::string::npos) << r;
  EXPECT_NE(r.find("# TYPE ftcc_recoveries_total counter"), std::string::npos) << r;
  EXPECT_NE(r.find("\nftcc_last_recovery_ms 12.5\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nftcc_spares_waiting 1\n"), std::string::npos) << r;
  EXPECT_NE(r.find("# TYPE ftcc_spares_joined_total counter\nftcc_spares_joined_total 2\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\nftcc_last_state_transfer_bytes 4096\n"), std::string::npos) << r;
  EXPECT_NE(r.find("# TYPE ftcc_replica_mismatches_total counter\nftcc_replica_mismatches_total 3\n"), std::string::npos) << r;
  EXPECT_NE(r.find("# TYPE ftcc_corrupt_ranks_excluded_total counter\nftcc_corrupt_ranks_excluded_total 2\n"),
            std::string::npos) << r;
}

TEST(MetricsServer, RejectsBadRequestsAndKeepsServing) {
  ft::MetricsServer server("127.0.0.1", 0);
  EXPECT_NE(exchange(server.port(), "GARBAGE\x01\x02 nonsense\r\n\r\n").find(" 400 "), std::string::npos);
  EXPECT_NE(exchange(server.port(), "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n").find(" 405 "), std::string::npos);
  EXPECT_NE(exchange(server.port(), "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n").find(" 404 "), std::string::npos);
  EXPECT_NE(exchange(server.port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n").find(" 400 "),
            std::string::npos);
  EXPECT_GE(server.bad_requests(), 2u);
  EXPECT_NE(exchange(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").find(" 200 "), std::string::npos);
}

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Idle connections (a client that connects and sends nothing) no longer hold a descriptor each in
// the job: the server keeps at most 16 open (the oldest closed), and a scrape is still answered.
TEST(MetricsServer, IdleConnectionsDoNotHoldTheProcessDescriptors) {
  ft::MetricsServer server("127.0.0.1", 0);
  const std::size_t before = open_descriptors();
  boost::asio::io_context io;
  std::vector<std::unique_ptr<tcp::socket>> idle;
  for (int i = 0; i < 64; ++i) {
    idle.push_back(std::make_unique<tcp::socket>(io));
    idle.back()->connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), server.port()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server accepts them all
  // The server's side (the clients' io_context adds its reactor's 2 or 3): 16, not 64.
  const std::size_t held = open_descriptors() - before - idle.size();
  EXPECT_LE(held, 20u) << "the server holds a descriptor per idle connection";
  EXPECT_NE(exchange(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").find(" 200 "), std::string::npos);
}

// Out of descriptors (EMFILE at accept): the server waits and tries again, it does not spin.
TEST(MetricsServer, OutOfDescriptorsDoesNotSpin) {
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  ft::MetricsServer server("127.0.0.1", 0);
  boost::asio::io_context io;
  std::vector<std::unique_ptr<tcp::socket>> clients;
  rlimit low = old;
  low.rlim_cur = open_descriptors() + 24;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  // Clients until the table is full: the connections the server could not accept wait in its
  // backlog, and each accept fails with EMFILE.
  // (error codes, not exceptions: nothing is thrown while the process is out of descriptors)
  for (int i = 0; i < 64; ++i) {
    auto s = std::make_unique<tcp::socket>(io);
    boost::system::error_code ec;
    s->open(tcp::v4(), ec);
    if (!ec) s->connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), server.port()), ec);
    if (ec) break;
    clients.push_back(std::move(s));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double t0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double used = cpu_seconds() - t0;
  clients.clear();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_LT(used, 0.3) << "the accept loop spun on EMFILE";
  // Descriptors back: the server serves again.
  EXPECT_NE(exchange(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").find(" 200 "), std::string::npos);
}

TEST(MetricsServer, BadBindAddressIsAClearError) {
  EXPECT_THROW(ft::MetricsServer("not-an-ip", 0), ftcc::InvalidArgument);
}

}  // namespace
