// Out-of-band heartbeat: peers hear each other, a silent peer is suspected, a SIGSTOPped real
// process on this host is fenced (SIGKILLed), and strangers / forgeries / replays change nothing.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74 awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "ftcc/recovery/heartbeat.hpp"
#include "ftcc/recovery/process_state.hpp"

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
  a.set_on_suspect([&](const fr::Suspicion& s) {
    EXPECT_FALSE(s.fenced_by_me);
    if (s.reported_by == 0) {
      EXPECT_GE(s.silent_s, 0.4);
    }
    a_suspected_rank = s.peer.rank;
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
  auto patient = fast(false);
  patient.timeout = 10s;  // the spy never beats: no suspicion (and no list in b's datagrams) meanwhile
  fr::Heartbeat a(0, "127.0.0.1", patient), b(1, "127.0.0.1", patient);
  // A socket of ours poses as a third member (rank 2) of b's job so we can capture b's datagrams.
  boost::asio::io_context io;
  udp::socket spy(io, udp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  fr::PeerAddress spy_addr;
  spy_addr.rank = 2;
  spy_addr.ip = "127.0.0.1";
  spy_addr.port = spy.local_endpoint().port();
  spy_addr.host = "nowhere";
  spy_addr.host_id = "nowhere/0";
  a.start({a.local_address(), b.local_address()}, secret, 9);
  b.start({a.local_address(), b.local_address(), spy_addr}, secret, 9);
  ASSERT_TRUE(wait_until([&] { return a.stats().accepted >= 3; }, 2000ms));

  // A heartbeat with nobody suspected: a 40-byte header and a 32-byte MAC.
  constexpr size_t kBeat = 72;
  char captured[kBeat];
  udp::endpoint from;
  ASSERT_EQ(spy.receive_from(boost::asio::buffer(captured), from), kBeat);

  const auto a_ep = udp::endpoint(boost::asio::ip::make_address("127.0.0.1"), a.local_address().port);
  const auto before = a.stats();
  // 1. garbage of the wrong size; 2. right size, zeros; 3. a forged datagram (valid layout,
  // MAC made with a wrong key); 4. a replay of b's real datagram (old sequence number).
  spy.send_to(boost::asio::buffer("hello", 5), a_ep);
  char zeros[kBeat] = {0};
  spy.send_to(boost::asio::buffer(zeros), a_ep);
  char forged[kBeat];
  std::memcpy(forged, captured, kBeat);
  forged[kBeat - 1] ^= 0x5a;
  spy.send_to(boost::asio::buffer(forged), a_ep);
  std::this_thread::sleep_for(150ms);  // let b send newer beats first
  spy.send_to(boost::asio::buffer(captured, kBeat), a_ep);
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
    parent.host_id = mine.host_id;
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
  kid.host_id = parent.local_address().host_id;
  kid.pid = child;
  kid.start_time = fr::process_start_time(child);
  ASSERT_NE(kid.start_time, 0u);
  std::atomic<bool> fenced{false};
  parent.set_on_suspect([&](const fr::Suspicion& s) {
    EXPECT_EQ(s.peer.rank, 1);
    fenced = s.fenced_by_me;
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

// Simulated hosts in one process: each Heartbeat is told its host's identity.
struct Cluster {
  std::vector<std::unique_ptr<fr::Heartbeat>> beats;
  std::vector<fr::PeerAddress> addrs;
  Cluster(int hosts, int per_host, fr::HeartbeatOptions o) {
    for (int h = 0; h < hosts; ++h)
      for (int i = 0; i < per_host; ++i) {
        char id[32];
        std::snprintf(id, sizeof id, "sim%d/0", h);
        o.host_id = id;
        beats.push_back(std::make_unique<fr::Heartbeat>(h * per_host + i, "127.0.0.1", o));
        addrs.push_back(beats.back()->local_address());
      }
  }
  void start(std::uint64_t job) {
    const auto secret = fr::Heartbeat::random_secret();
    for (auto& b : beats) b->start(addrs, secret, job);
  }
};

TEST(Heartbeat, ALostHostIsKnownToEveryRankWithinTheTimeoutAndAPeriod) {
  Cluster c(6, 3, fast(false));
  c.start(21);
  ASSERT_TRUE(wait_until([&] { return c.beats[0]->stats().accepted >= 3 && c.beats[17]->stats().accepted >= 3; }, 2000ms));
  const auto t0 = std::chrono::steady_clock::now();
  for (int r : {15, 16, 17}) c.beats[r]->stop();  // host 5 goes silent as a whole
  for (int r = 0; r < 15; ++r)
    ASSERT_TRUE(wait_until([&] { return c.beats[r]->suspected() == std::vector<int>{15, 16, 17}; }, 3000ms))
        << "rank " << r << " suspects " << c.beats[r]->suspected().size() << " rank(s)";
  const double all_know_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Timing is measured in tests/reliability/multihost.py; here only a bound loose enough for a loaded VM.
  EXPECT_LT(all_know_s, 0.4 + 1.5);
  std::uint64_t detected = 0;
  for (int r = 0; r < 15; ++r) detected += c.beats[r]->stats().detected;
  EXPECT_GE(detected, 3u) << "someone found the silent host itself";
  // Only the speakers of the four neighbouring hosts watch host 5 (2 x 4 ranks x 3 ranks of it);
  // the other seven ranks heard the news.
  EXPECT_LE(detected, 24u);
}

TEST(Heartbeat, OneStoppedSpeakerDoesNotSinkItsHost) {
  Cluster c(3, 2, fast(false));
  c.start(22);
  ASSERT_TRUE(wait_until([&] { return c.beats[0]->stats().accepted >= 3 && c.beats[5]->stats().accepted >= 3; }, 2000ms));
  c.beats[4]->stop();  // a speaker of host 2; its host-mate 5 still beats for the host
  for (int r : {0, 1, 2, 3, 5})
    ASSERT_TRUE(wait_until([&] { return c.beats[r]->suspected() == std::vector<int>{4}; }, 3000ms)) << "rank " << r;
  std::this_thread::sleep_for(800ms);  // two more timeouts: rank 5 stays unsuspected everywhere
  for (int r : {0, 1, 2, 3, 5}) EXPECT_EQ(c.beats[r]->suspected(), std::vector<int>{4}) << "rank " << r;
  EXPECT_GE(c.beats[5]->stats().detected, 1u) << "its host-mate found it";
}

// A process on another (simulated) host, SIGSTOPped: the others exclude it, and when it runs
// again it reads itself in their replies and stops itself (here: exits 42).
TEST(Heartbeat, AnExcludedRankLearnsItWhenItRunsAgain) {
  const auto secret = fr::Heartbeat::random_secret();
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto o = fast(false);
    o.host_id = "far/0";
    fr::Heartbeat me(2, "127.0.0.1", o);
    auto mine = me.local_address();
    std::uint16_t ports[2];
    if (write(to_parent[1], &mine.port, sizeof mine.port) != sizeof mine.port) _exit(2);
    if (read(to_child[0], ports, sizeof ports) != sizeof ports) _exit(3);
    std::vector<fr::PeerAddress> all;
    for (int r = 0; r < 2; ++r) {
      fr::PeerAddress p;
      p.rank = r;
      p.ip = "127.0.0.1";
      p.port = ports[r];
      p.host_id = "near/0";
      all.push_back(p);
    }
    all.push_back(mine);
    me.set_on_excluded([](int) { _exit(42); });
    me.start(all, secret, 23);
    for (;;) pause();
  }
  auto o = fast(false);
  o.host_id = "near/0";
  fr::Heartbeat a(0, "127.0.0.1", o), b(1, "127.0.0.1", o);
  fr::PeerAddress kid;
  kid.rank = 2;
  kid.ip = "127.0.0.1";
  kid.host_id = "far/0";
  ASSERT_EQ(read(to_parent[0], &kid.port, sizeof kid.port), (ssize_t)sizeof kid.port);
  const std::uint16_t ports[2] = {a.local_address().port, b.local_address().port};
  ASSERT_EQ(write(to_child[1], ports, sizeof ports), (ssize_t)sizeof ports);
  const std::vector<fr::PeerAddress> all = {a.local_address(), b.local_address(), kid};
  a.start(all, secret, 23);
  b.start(all, secret, 23);
  ASSERT_TRUE(wait_until([&] { return a.stats().accepted >= 6; }, 2000ms)) << "child never heartbeated";
  kill(child, SIGSTOP);
  ASSERT_TRUE(wait_until([&] { return a.suspected() == std::vector<int>{2} && b.suspected() == std::vector<int>{2}; }, 3000ms));
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, WNOHANG), 0) << "still stopped, not dead";
  kill(child, SIGCONT);
  ASSERT_TRUE(wait_until([&] { return waitpid(child, &status, WNOHANG) == child; }, 3000ms)) << "never stopped itself";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 42) << "status " << status;
  EXPECT_GE(a.stats().excluded_replies + b.stats().excluded_replies, 1u);
  EXPECT_EQ(a.suspected(), std::vector<int>{2}) << "its own (stale) view excluded nobody";
}

TEST(Heartbeat, HostIdentityTellsNamespacesApart) {
  const std::string mine = fr::Heartbeat::host_identity();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  ASSERT_EQ(mine.rfind(std::string(host) + "/", 0), 0u) << mine;
  EXPECT_EQ(fr::Heartbeat::host_identity(), mine) << "stable";
  // A process in a network namespace of its own (a container on the same machine, or a simulated
  // host) is another host, although it shares the host name, boot id and pid namespace.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(77);
    const std::string other = fr::Heartbeat::host_identity();
    if (write(fds[1], other.data(), other.size()) != static_cast<ssize_t>(other.size())) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  char buf[512] = {0};
  const ssize_t n = read(fds[0], buf, sizeof buf - 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "unshare(CLONE_NEWNET) needs root";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string other(buf, n > 0 ? static_cast<size_t>(n) : 0);
  EXPECT_EQ(other.rfind(std::string(host) + "/", 0), 0u) << other;
  EXPECT_NE(other, mine) << "another network namespace is another host";
}

// The ULFM-call deadline asks whether some peer is behind; with speakers, a rank hears only a
// few others, so the counts travel as host and job minima.
TEST(Heartbeat, ARankBehindIsSeenFromEveryRank) {
  Cluster c(2, 4, fast(false));
  for (auto& b : c.beats) b->set_progress(10);
  c.beats[7]->set_progress(3);  // not a speaker of host 1: only its speakers hear it directly
  c.start(24);
  for (int r = 0; r < 7; ++r)
    ASSERT_TRUE(wait_until([&] { return c.beats[r]->peer_behind(10) == 7; }, 2000ms))
        << "rank " << r << " sees " << c.beats[r]->peer_behind(10);
  c.beats[7]->set_progress(10);
  for (int r = 0; r < 7; ++r)
    ASSERT_TRUE(wait_until([&] { return c.beats[r]->peer_behind(10) == -1; }, 2000ms)) << "rank " << r << " still sees it behind";
  EXPECT_EQ(c.beats[7]->peer_behind(10), -1);
}

// A rank gone silent (killed, not yet suspected: a long timeout here) is not named as the one
// behind, however low its last count: the live laggard is (the deadline's line named a rank
// SIGKILLed seconds earlier, "it still heartbeats").
TEST(Heartbeat, ASilentRankIsNotNamedAsBehind) {
  fr::HeartbeatOptions o = fast(false);
  o.timeout = 10s;
  Cluster c(1, 3, o);
  for (auto& b : c.beats) b->set_progress(10);
  c.beats[2]->set_progress(3);
  c.start(25);
  ASSERT_TRUE(wait_until([&] { return c.beats[0]->peer_behind(10) == 2; }, 2000ms)) << c.beats[0]->peer_behind(10);
  c.beats[2]->stop();
  c.beats[1]->set_progress(5);
  ASSERT_TRUE(wait_until([&] { return c.beats[0]->peer_behind(10) == 1; }, 2000ms))
      << "rank 0 names rank " << c.beats[0]->peer_behind(10) << ", silent for 2 s";
  EXPECT_TRUE(c.beats[0]->suspected().empty()) << "nobody suspected yet: only the silence decides";
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
  ghost.host_id = parent.local_address().host_id;
  ghost.pid = getpid();  // would kill this test if the start-time guard were missing
  ghost.start_time = fr::process_start_time(getpid()) + 12345;
  std::atomic<bool> suspected{false}, fenced{false};
  parent.set_on_suspect([&](const fr::Suspicion& s) {
    suspected = true;
    fenced = s.fenced_by_me;
  });
  parent.start({parent.local_address(), ghost}, secret, 12);
  ASSERT_TRUE(wait_until([&] { return suspected.load(); }, 3000ms));
  EXPECT_FALSE(fenced.load());
  EXPECT_EQ(parent.stats().fenced, 0u);
}

}  // namespace
