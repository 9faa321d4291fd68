// ftcc-netem: delay and loss on a network link, for kernels built without `tc netem`
// (CONFIG_NET_SCH_NETEM off, as on this project's VMs).
//
//   ftcc-netem --queue 0 --delay-ms 20 --loss 2 [--seed 1]
//
// Holds every packet the kernel hands to NFQUEUE `queue` for `delay-ms`, then lets it go
// (constant delay keeps the order), and drops each with probability `loss` percent, like
// `tc qdisc add dev DEV root netem delay 20ms loss 2%` on the egress of DEV. The packets come from
// an NFQUEUE rule, e.g. in a host's network namespace:
//   iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass
// (`--queue-bypass`: if this program is not running, packets pass untouched). tools/netns-hosts does
// this. Prints "ready" once the queue is bound; runs until SIGTERM/SIGINT; prints one line of
// counts on exit. Needs CAP_NET_ADMIN.
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <random>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct Held {
  std::uint32_t id;
  Clock::time_point due;
};

struct State {
  std::chrono::microseconds delay{0};
  double loss = 0;  // probability in [0, 1]
  std::mt19937_64 rng{1};
  std::uniform_real_distribution<double> uniform{0.0, 1.0};
  std::deque<Held> held;
  std::uint64_t seen = 0, dropped = 0, passed = 0;
};

int on_packet(nfq_q_handle* qh, nfgenmsg*, nfq_data* nfa, void* data) {
  auto* st = static_cast<State*>(data);
  const nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == nullptr) return 0;
  const std::uint32_t id = ntohl(ph->packet_id);
  ++st->seen;
  if (st->loss > 0 && st->uniform(st->rng) < st->loss) {
    ++st->dropped;
    return nfq_set_verdict(qh, id, NF_DROP, 0, nullptr);
  }
  if (st->delay.count() == 0) {
    ++st->passed;
    return nfq_set_verdict(qh, id, NF_ACCEPT, 0, nullptr);
  }
  st->held.push_back({id, Clock::now() + st->delay});
  return 0;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ftcc-netem: %s\nusage: ftcc-netem --queue N --delay-ms MS --loss PERCENT [--seed S]\n", why);
  std::exit(2);  // NOLINT(concurrency-mt-unsafe): flag parsing, one thread
}

double number(const char* flag, const char* text, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= lo && v <= hi))
    usage((std::string(flag) + " '" + text + "': expected a number in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]")
              .c_str());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int queue = -1;
  State st;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "--queue") queue = static_cast<int>(number("--queue", v, 0, 65535));
    else if (a == "--delay-ms") st.delay = std::chrono::microseconds(static_cast<long long>(number("--delay-ms", v, 0, 60000) * 1000));
    else if (a == "--loss") st.loss = number("--loss", v, 0, 100) / 100.0;
    else if (a == "--seed") st.rng.seed(static_cast<std::uint64_t>(number("--seed", v, 0, 1e18)));
    else usage(("unknown flag " + a).c_str());
  }
  if (queue < 0) usage("--queue is required");

  nfq_handle* h = nfq_open();
  if (h == nullptr) {
    std::perror("ftcc-netem: nfq_open (needs CAP_NET_ADMIN)");
    return 1;
  }
  nfq_q_handle* qh = nfq_create_queue(h, static_cast<std::uint16_t>(queue), &on_packet, &st);
  if (qh == nullptr) {
    std::fprintf(stderr, "ftcc-netem: cannot bind NFQUEUE %d (another program has it?)\n", queue);
    nfq_close(h);
    return 1;
  }
  // Verdicts only: no payload copied to user space.
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(qh, 20000) < 0) {
    std::fprintf(stderr, "ftcc-netem: cannot configure NFQUEUE %d\n", queue);
    nfq_destroy_queue(qh);
    nfq_close(h);
    return 1;
  }
  nfnl_rcvbufsiz(nfq_nfnlh(h), 16 << 20);
  const int fd = nfq_fd(h);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  alignas(8) char buf[65536];
  std::fprintf(stderr, "ftcc-netem: ready: queue %d, delay %.1f ms, loss %.2f%%\n", queue,
               static_cast<double>(st.delay.count()) / 1000.0, st.loss * 100);
  std::fflush(stderr);
  while (!g_stop) {
    int timeout_ms = 100;
    if (!st.held.empty()) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(st.held.front().due - Clock::now());
      timeout_ms = static_cast<int>(std::max<long long>(0, wait.count()));
    }
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, timeout_ms);
    if (r > 0 && (p.revents & POLLIN)) {
      // Drain what is there without blocking.
      for (;;) {
        const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          nfq_handle_packet(h, buf, static_cast<int>(n));
          continue;
        }
        if (n < 0 && errno == ENOBUFS) continue;  // kernel dropped some: they count as loss
        break;
      }
    }
    const auto now = Clock::now();
    while (!st.held.empty() && st.held.front().due <= now) {
      nfq_set_verdict(qh, st.held.front().id, NF_ACCEPT, 0, nullptr);
      st.held.pop_front();
      ++st.passed;
    }
  }
  for (const Held& x : st.held) nfq_set_verdict(qh, x.id, NF_ACCEPT, 0, nullptr);
  std::fprintf(stderr, "ftcc-netem: %llu packets, %llu dropped, %llu passed\n",
               static_cast<unsigned long long>(st.seen), static_cast<unsigned long long>(st.dropped),
               static_cast<unsigned long long>(st.passed) + st.held.size());
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
