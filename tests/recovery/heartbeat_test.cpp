// Out-of-band heartbeat: peers hear each other, a silent peer is suspected, a SIGSTOPped real
// process on this host is fenced (SIGKILLed), and strangers / forgeries / replays change nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74 awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "ftcc/recovery/heartbeat.hpp"

namespace fr = ftcc::recovery;
using namespace std::chrono_literals;
using boost::asio::ip::udp;

namespace {

fr::HeartbeatOptions fast(bool fence) {
  fr::HeartbeatOptions o;
  o.period = 50ms;
  o.timeout = 400ms;
  o.fence = fence;
  return o;
}

template <class Pred>
bool wait_until(Pred p, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return p();
}

TEST(Heartbeat, PeersHearEachOtherAndSuspectASilentOne) {
  const auto secret = fr::Heartbeat::random_secret();
  fr::Heartbeat a(0, "127.0.0.1", fast(false)), b(1, "127.0.0.1", fast(false)), c(2, "127.0.0.1", fast(false));
  const std::vector<fr::PeerAddress> peers = {a.local_address(), b.local_address(), c.local_address()};
  std::atomic<int> a_suspected_rank{-1};
  a.set_on_suspect([&](const fr::PeerAddress& p, double silent, bool fenced) {
    EXPECT_FALSE(fenced);
    EXPECT_GE(silent, 0.4);
    a_suspected_rank = p.rank;
  });
  a.start(peers, secret, 7);
  b.start(peers, secret, 7);
  c.start(peers, secret, 7);
  ASSERT_TRUE(wait_until([&] { return a.stats().accepted >= 4 && c.stats().accepted >= 4; }, 2000ms));
  EXPECT_EQ(a.stats().rejected, 0u);
  EXPECT_EQ(a.stats().suspected, 0u);

  c.stop();  // c goes silent, as a stopped process would
  ASSERT_TRUE(wait_until([&] { return a_suspected_rank.load() == 2; }, 3000ms));
  EXPECT_EQ(a.stats().suspected, 1u) << "only the silent peer is suspected";
  // b watches on its own thread and timer: it may notice a moment after a (seen under load).
  ASSERT_TRUE(wait_until([&] { return b.stats().suspected >= 1; }, 3000ms));
  EXPECT_EQ(b.stats().suspected, 1u) << "only the silent peer is suspected";
}

TEST(Heartbeat, StrangersForgeriesAndReplaysAreIgnored) {
  const auto secret = fr::Heartbeat::random_secret();
  fr::Heartbeat a(0, "127.0.0.1", fast(false)), b(1, "127.0.0.1", fast(false));
  // A socket of ours poses as a third member (rank 2) of b's job so we can capture b's datagrams.
  boost::asio::io_context io;
  udp::socket spy(io, udp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  fr::PeerAddress spy_addr;
  spy_addr.rank = 2;
  spy_addr.ip = "127.0.0.1";
  spy_addr.port = spy.local_endpoint().port();
  spy_addr.host = "nowhere";
  a.start({a.local_address(), b.local_address()}, secret, 9);
  b.start({a.local_address(), b.local_address(), spy_addr}, secret, 9);
  ASSERT_TRUE(wait_until([&] { return a.stats().accepted >= 3; }, 2000ms));

  char captured[64];
  udp::endpoint from;
  ASSERT_EQ(spy.receive_from(boost::asio::buffer(captured), from), 64u);

  const auto a_ep = udp::endpoint(boost::asio::ip::make_address("127.0.0.1"), a.local_address().port);
  const auto before = a.stats();
  // 1. garbage of the wrong size; 2. right size, zeros; 3. a forged datagram (valid layout,
  // MAC made with a wrong key); 4. a replay of b's real datagram (old sequence number).
  spy.send_to(boost::asio::buffer("hello", 5), a_ep);
  char zeros[64] = {0};
  spy.send_to(boost::asio::buffer(zeros), a_ep);
  char forged[64];
  std::memcpy(forged, captured, 64);
  forged[63] ^= 0x5a;
  spy.send_to(boost::asio::buffer(forged), a_ep);
  std::this_thread::sleep_for(150ms);  // let b send newer beats first
  spy.send_to(boost::asio::buffer(captured, 64), a_ep);
  ASSERT_TRUE(wait_until([&] { return a.stats().rejected >= before.rejected + 4; }, 2000ms))
      << "rejected " << a.stats().rejected;
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(a.stats().suspected, 0u);
  EXPECT_GT(a.stats().accepted, before.accepted) << "b's real heartbeats still count";
}

// A real child process on this host, SIGSTOPped: the parent (the lowest live rank on the host)
// must fence it with SIGKILL within the timeout plus a period or two.
TEST(Heartbeat, FencesAStoppedProcessOnThisHost) {
  const auto secret = fr::Heartbeat::random_secret();
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    fr::Heartbeat me(1, "127.0.0.1", fast(false));
    auto mine = me.local_address();
    std::uint16_t parent_port = 0;
    if (write(to_parent[1], &mine.port, sizeof mine.port) != sizeof mine.port) _exit(2);
    if (read(to_child[0], &parent_port, sizeof parent_port) != sizeof parent_port) _exit(3);
    fr::PeerAddress parent;
    parent.rank = 0;
    parent.ip = "127.0.0.1";
    parent.port = parent_port;
    parent.host = mine.host;
    me.start({parent, mine}, secret, 11);
    for (;;) pause();
  }
  fr::Heartbeat parent(0, "127.0.0.1", fast(true));
  fr::PeerAddress kid;
  kid.rank = 1;
  kid.ip = "127.0.0.1";
  ASSERT_EQ(read(to_parent[0], &kid.port, sizeof kid.port), (ssize_t)sizeof kid.port);
  const auto my_port = parent.local_address().port;
  ASSERT_EQ(write(to_child[1], &my_port, sizeof my_port), (ssize_t)sizeof my_port);
  kid.host = parent.local_address().host;
  kid.pid = child;
  kid.start_time = fr::Heartbeat::process_start_time(child);
  ASSERT_NE(kid.start_time, 0u);
  std::atomic<bool> fenced{false};
  parent.set_on_suspect([&](const fr::PeerAddress& p, double, bool by_me) {
    EXPECT_EQ(p.rank, 1);
    fenced = by_me;
  });
  parent.start({parent.local_address(), kid}, secret, 11);
  ASSERT_TRUE(wait_until([&] { return parent.stats().accepted >= 3; }, 2000ms)) << "child never heartbeated";

  const auto t0 = std::chrono::steady_clock::now();
  kill(child, SIGSTOP);
  ASSERT_TRUE(wait_until([&] { return fenced.load(); }, 3000ms)) << "stopped child was not fenced";
  const double detect_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(detect_s, 0.4 + 1.0) << "detection within timeout + 1 s";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(Heartbeat, NeverFencesARecycledPid) {
  // A record whose start time does not match the live process must not be killed.
  const auto secret = fr::Heartbeat::random_secret();
  fr::Heartbeat parent(0, "127.0.0.1", fast(true));
  fr::PeerAddress ghost;
  ghost.rank = 1;
  ghost.ip = "127.0.0.1";
  ghost.port = 9;  // discard port: nobody answers, so it is suspected
  ghost.host = parent.local_address().host;
  ghost.pid = getpid();  // would kill this test if the start-time guard were missing
  ghost.start_time = fr::Heartbeat::process_start_time(getpid()) + 12345;
  std::atomic<bool> suspected{false}, fenced{false};
  parent.set_on_suspect([&](const fr::PeerAddress&, double, bool by_me) {
    suspected = true;
    fenced = by_me;
  });
  parent.start({parent.local_address(), ghost}, secret, 12);
  ASSERT_TRUE(wait_until([&] { return suspected.load(); }, 3000ms));
  EXPECT_FALSE(fenced.load());
  EXPECT_EQ(parent.stats().fenced, 0u);
}

}  // namespace

TEST(Heartbeat, ProcessGoneConfirmsOnlyDeaths) {
  // The quorum rule of a recovery counts a lost rank as dead only when this is true.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (;;) pause();
  }
  const auto start = fr::Heartbeat::process_start_time(child);
  ASSERT_NE(start, 0u);
  EXPECT_FALSE(fr::Heartbeat::process_gone(child, start)) << "running";
  kill(child, SIGSTOP);
  ASSERT_TRUE(wait_until([&] {
    std::ifstream in("/proc/" + std::to_string(child) + "/stat");
    std::string s;
    std::getline(in, s);
    return s.find(") T ") != std::string::npos;
  }, 2000ms));
  EXPECT_FALSE(fr::Heartbeat::process_gone(child, start)) << "stopped is alive (a hang, not a death)";
  EXPECT_TRUE(fr::Heartbeat::process_gone(child, start + 1)) << "another process under the same pid";
  kill(child, SIGKILL);
  ASSERT_TRUE(wait_until([&] { return fr::Heartbeat::process_gone(child, start); }, 2000ms)) << "zombie";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(fr::Heartbeat::process_gone(child, start)) << "reaped";
  EXPECT_FALSE(fr::Heartbeat::process_gone(0, 0)) << "unknown pid confirms nothing";
}
