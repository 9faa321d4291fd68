#include "ftcc/recovery/heartbeat.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74 awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/host_identity.hpp"
#include "ftcc/recovery/heartbeat_topology.hpp"
#include "ftcc/recovery/process_state.hpp"

namespace ftcc::recovery {
namespace {

using boost::asio::ip::udp;
using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'F', 'T', 'C', 'C', 'H', 'B', '2', 0};

// Wire format, little-endian host order (all ranks of a job share an ABI): a header, `count`
// suspected ranks (uint32), then the HMAC-SHA256 of everything before it.
struct Header {
  char magic[8];
  std::uint64_t job_id;
  std::uint32_t rank;
  std::uint32_t progress;  // the sender's count of entered ULFM calls (Heartbeat::set_progress)
  std::uint64_t seq;
  std::uint32_t count;     // suspected ranks listed after the header
  std::uint32_t reserved;
  // The fewest entered ULFM calls the sender knows of, and whose: on its host (a speaker: from the
  // host's ranks' own counts) and in the job (a speaker: its host and the other hosts' speakers'
  // host minima; any other rank: its speakers' job minimum). From own counts only, so a stale
  // minimum can never feed back into itself.
  std::uint32_t host_min, host_min_rank, job_min, job_min_rank;
};
static_assert(sizeof(Header) == 56);
constexpr size_t kMacBytes = 32;
constexpr std::uint32_t kMaxListed = 240;  // keeps a datagram under 1100 bytes
constexpr size_t kMaxDatagram = sizeof(Header) + 4 * kMaxListed + kMacBytes;
constexpr std::uint32_t kNobody = 0xffffffffu;

std::array<std::uint8_t, kMacBytes> mac_of(const Secret& key, const std::uint8_t* data, size_t n) {
  std::array<std::uint8_t, kMacBytes> mac{};
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data, n, mac.data(), &len);
  return mac;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

struct Heartbeat::Impl {
  int my_rank;
  HeartbeatOptions opt;
  boost::asio::io_context io;
  udp::socket socket{io};
  boost::asio::steady_timer timer{io};
  std::thread thread;
  mutable std::mutex mu;  // guards everything below but the atomics, and the callbacks
  // Proof that mu is held: every function that reads or writes what mu guards takes one, so a
  // call without the lock does not compile (both threads call them: the owner's and Asio's).
  using MuHeld = std::lock_guard<std::mutex>;
  std::map<int, PeerAddress> known;            // every rank ever told of, self included
  std::map<int, udp::endpoint> endpoints;
  std::set<int> suspected;                     // monotone
  std::vector<int> suspect_order;              // suspected, in the order learned (newest last)
  HeartbeatLinks links;
  std::map<int, Clock::time_point> last_heard, watch_since;
  std::map<int, std::uint64_t> last_seq;
  struct Progress {
    std::uint32_t own = 0, host_min = 0, host_min_rank = kNobody, job_min = 0, job_min_rank = kNobody;
  };
  std::map<int, Progress> progress_of;  // the last report of each sender
  std::map<int, Clock::time_point> replied_at;  // last reply to a suspected rank that spoke
  std::set<int> gone;                 // suspects on this host whose process is confirmed dead
  std::set<int> fenced_by_me;         // suspects this rank sent SIGKILL
  std::map<int, int> reporter_of;     // who found each suspect silent (for the messages)
  Clock::time_point last_tick;
  Secret secret{};
  std::uint64_t job_id = 0;
  std::uint64_t seq = 0;
  std::atomic<std::uint32_t> progress{0};
  HeartbeatStats st;
  SuspectCallback on_suspect;
  ExcludedCallback on_excluded;
  bool excluded = false;
  std::array<std::uint8_t, 2048> rx{};
  udp::endpoint rx_from;
  std::string host = hostname();
  std::string host_id;
  bool running = false;

  Impl(int rank, const std::string& ip, HeartbeatOptions o)
      : my_rank(rank), opt(o), host_id(o.host_id.empty() ? Heartbeat::host_identity() : o.host_id) {
    const auto addr = boost::asio::ip::make_address(ip);
    socket.open(addr.is_v4() ? udp::v4() : udp::v6());
    socket.bind(udp::endpoint(addr, 0));
  }

  // --- membership (each takes MuHeld: mu held) ---

  void relink(const MuHeld&, Clock::time_point now) {
    std::vector<HeartbeatMember> live;
    for (const auto& [r, p] : known)
      if (!suspected.count(r)) live.push_back({r, p.host_id});
    if (excluded) return;  // the owner stops the process
    const HeartbeatLinks before = links;
    links = heartbeat_links(my_rank, live, opt.fanout);
    // A rank newly watched, and a host newly watched or whose live ranks changed (its speakers may
    // be new), get one full timeout from now before they can be suspected.
    auto has = [](const std::vector<int>& v, int r) { return std::find(v.begin(), v.end(), r) != v.end(); };
    for (int r : links.watch_ranks)
      if (!has(before.watch_ranks, r)) watch_since[r] = now;
    for (const auto& h : links.watch_hosts)
      if (std::find(before.watch_hosts.begin(), before.watch_hosts.end(), h) == before.watch_hosts.end())
        for (int r : h) watch_since[r] = now;
    // Forget the progress of ranks no longer heard: their last report only grows stale.
    std::set<int> heard_from(links.watch_ranks.begin(), links.watch_ranks.end());
    for (const auto& h : links.watch_hosts) heard_from.insert(h.begin(), h.end());
    for (auto it = progress_of.begin(); it != progress_of.end();)
      it = heard_from.count(it->first) ? std::next(it) : progress_of.erase(it);
  }

  // The minima this rank reports.
  void minima(const MuHeld& held, Header& h) const {
    const std::uint32_t own = progress.load(std::memory_order_relaxed);
    // Only ranks heard within the last 3 periods count: a rank killed a while ago keeps its last
    // count here until it is suspected, and would be named as the one behind ("it still
    // heartbeats") instead of the real laggard.
    const auto fresh_since = Clock::now() - 3 * opt.period;
    auto fresh = [&](int r) { return heard(held, r) >= fresh_since; };
    h.progress = own;
    h.host_min = own, h.host_min_rank = static_cast<std::uint32_t>(my_rank);
    auto lower = [](std::uint32_t& v, std::uint32_t& who, std::uint32_t cand, std::uint32_t cand_who) {
      if (cand_who != kNobody && cand < v) v = cand, who = cand_who;
    };
    if (links.speaker) {
      for (int r : links.watch_ranks)  // the host's ranks, by their own counts
        if (auto it = progress_of.find(r); it != progress_of.end() && fresh(r))
          lower(h.host_min, h.host_min_rank, it->second.own, static_cast<std::uint32_t>(r));
      h.job_min = h.host_min, h.job_min_rank = h.host_min_rank;
      for (const auto& [r, p] : progress_of)  // other hosts' speakers: their host minima
        if (!std::count(links.watch_ranks.begin(), links.watch_ranks.end(), r) && fresh(r))
          lower(h.job_min, h.job_min_rank, p.host_min, p.host_min_rank);
    } else {
      h.job_min = own, h.job_min_rank = h.host_min_rank;
      for (const auto& [r, p] : progress_of)  // my speakers
        if (fresh(r)) lower(h.job_min, h.job_min_rank, p.job_min, p.job_min_rank);
    }
  }

  bool watches(const MuHeld&, int r) const {
    if (std::find(links.watch_ranks.begin(), links.watch_ranks.end(), r) != links.watch_ranks.end()) return true;
    for (const auto& h : links.watch_hosts)
      if (std::find(h.begin(), h.end(), r) != h.end()) return true;
    return false;
  }

  Clock::time_point heard(const MuHeld&, int r) const {
    Clock::time_point t{};
    if (auto it = last_heard.find(r); it != last_heard.end()) t = it->second;
    if (auto it = watch_since.find(r); it != watch_since.end()) t = std::max(t, it->second);
    return t;
  }

  // --- datagrams (MuHeld: mu held) ---

  std::vector<std::uint8_t> datagram(const MuHeld& held, int to) {
    std::vector<std::uint32_t> listed;
    if (suspected.count(to)) listed.push_back(static_cast<std::uint32_t>(to));  // a reply names its addressee
    for (auto it = suspect_order.rbegin(); it != suspect_order.rend() && listed.size() < kMaxListed; ++it)
      if (*it != to) listed.push_back(static_cast<std::uint32_t>(*it));
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.job_id = job_id;
    h.rank = static_cast<std::uint32_t>(my_rank);
    minima(held, h);
    h.seq = ++seq;
    h.count = static_cast<std::uint32_t>(listed.size());
    std::vector<std::uint8_t> d(sizeof h + 4 * listed.size() + kMacBytes);
    std::memcpy(d.data(), &h, sizeof h);
    if (!listed.empty()) std::memcpy(d.data() + sizeof h, listed.data(), 4 * listed.size());
    const auto mac = mac_of(secret, d.data(), d.size() - kMacBytes);
    std::memcpy(d.data() + d.size() - kMacBytes, mac.data(), kMacBytes);
    return d;
  }

  void send(const MuHeld& held, int to) {
    auto it = endpoints.find(to);
    if (it == endpoints.end()) return;
    const auto d = datagram(held, to);
    boost::system::error_code ignored;
    socket.send_to(boost::asio::buffer(d), it->second, 0, ignored);
    ++st.sent;
  }

  void receive() {
    socket.async_receive_from(boost::asio::buffer(rx), rx_from, [this](const boost::system::error_code& ec, size_t n) {
      if (ec == boost::asio::error::operation_aborted) return;
      if (!ec) accept(n);
      receive();
    });
  }

  struct News {
    std::vector<Suspicion> suspicions;
    int excluded_by = -1;
  };

  void accept(size_t n) {
    News news;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!parse_and_learn(lock, n, news)) ++st.rejected;
    }
    deliver(news);
  }

  bool parse_and_learn(const MuHeld& held, size_t n, News& news) {
    Header h{};
    if (n < sizeof h + kMacBytes || n > kMaxDatagram) return false;
    std::memcpy(&h, rx.data(), sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.job_id != job_id || h.count > kMaxListed ||
        n != sizeof h + 4 * size_t{h.count} + kMacBytes)
      return false;
    const auto mac = mac_of(secret, rx.data(), n - kMacBytes);
    if (CRYPTO_memcmp(mac.data(), rx.data() + n - kMacBytes, kMacBytes) != 0) return false;
    const int from = static_cast<int>(h.rank);
    if (from == my_rank || !known.count(from)) return false;  // stranger
    auto& last = last_seq[from];
    if (h.seq <= last) return false;  // replay
    last = h.seq;
    ++st.accepted;
    const auto now = Clock::now();
    if (suspected.count(from)) {
      // It speaks again after being suspected: tell it (at most once a period), ignore its news.
      auto& at = replied_at[from];
      if (now - at >= opt.period) {
        at = now;
        send(held, from);
        ++st.excluded_replies;
      }
      return true;
    }
    last_heard[from] = now;
    if (watches(held, from)) progress_of[from] = {h.progress, h.host_min, h.host_min_rank, h.job_min, h.job_min_rank};
    std::vector<int> listed(h.count);
    for (std::uint32_t i = 0; i < h.count; ++i) {
      std::uint32_t r = 0;
      std::memcpy(&r, rx.data() + sizeof h + 4 * size_t{i}, 4);
      listed[i] = static_cast<int>(r);
    }
    learn(held, listed, from, now, news);
    return true;
  }

  // New suspects (own finding when reporter == my_rank): recorded, links recomputed, news sent on.
  void learn(const MuHeld& held, const std::vector<int>& ranks, int reporter, Clock::time_point now, News& news) {
    std::vector<int> fresh;
    for (int r : ranks) {
      if (r == my_rank) {
        if (!excluded && reporter != my_rank) {
          excluded = true;
          news.excluded_by = reporter;
        }
        continue;
      }
      if (!suspected.insert(r).second) continue;
      suspect_order.push_back(r);
      fresh.push_back(r);
    }
    if (news.excluded_by >= 0) {
      // Excluded: pass the list on to this host's other ranks before the owner stops this process
      // (they may be excluded too, and would otherwise wait a timeout each to find out).
      for (const auto& [r, p] : known)
        if (r != my_rank && p.host_id == host_id) send(held, r);
    }
    if (fresh.empty()) return;
    st.suspected += fresh.size();
    if (reporter == my_rank) st.detected += fresh.size();
    for (int r : fresh) {
      Suspicion s;
      if (auto it = known.find(r); it != known.end()) s.peer = it->second;
      s.peer.rank = r;
      s.silent_s = std::chrono::duration<double>(now - heard(held, r)).count();
      s.reported_by = reporter;
      reporter_of[r] = reporter;
      news.suspicions.push_back(s);
    }
    const auto told = links.news_to;
    relink(held, now);
    std::set<int> to(told.begin(), told.end());
    to.insert(links.news_to.begin(), links.news_to.end());
    for (int r : to)
      if (!suspected.count(r)) send(held, r);
  }

  // Fencing and callbacks, outside the lock.
  void deliver(News& news) {
    // Fencing converges: every suspect on this host that is still alive is fenced by the lowest
    // unsuspected rank on the host, chosen anew each time (every period and with every news), so a
    // fencer that is itself suspected later (stopped too) is replaced by the next one.
    std::vector<PeerAddress> to_fence;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (opt.fence && !excluded)
        for (int r : suspected)
          if (auto it = known.find(r); it != known.end() && !gone.count(r) && i_am_fencer(lock, it->second))
            to_fence.push_back(it->second);
    }
    std::set<int> fenced_now;
    for (const auto& p : to_fence) {
      if (process_gone(p.pid, p.start_time)) {
        std::lock_guard<std::mutex> lock(mu);
        gone.insert(p.rank);
        continue;
      }
      // Never kill a recycled pid: the start time must be the one recorded at start.
      if (p.pid > 0 && p.start_time != 0 && process_start_time(p.pid) == p.start_time) {
        ::kill(p.pid, SIGKILL);
        std::lock_guard<std::mutex> lock(mu);
        if (fenced_by_me.insert(p.rank).second) {
          ++st.fenced;
          fenced_now.insert(p.rank);
        }
      }
    }
    for (auto& s : news.suspicions) s.fenced_by_me = fenced_now.erase(s.peer.rank) > 0;
    // A suspect fenced now that was suspected earlier (its first fencer was suspected since): say so.
    for (int r : fenced_now) {
      Suspicion s;
      std::lock_guard<std::mutex> lock(mu);
      s.peer = known.at(r);
      s.silent_s = std::chrono::duration<double>(Clock::now() - heard(lock, r)).count();
      s.fenced_by_me = true;
      s.reported_by = reporter_of.count(r) ? reporter_of.at(r) : my_rank;
      news.suspicions.push_back(s);
    }
    SuspectCallback cb;
    ExcludedCallback ex;
    {
      std::lock_guard<std::mutex> lock(mu);
      cb = on_suspect;
      ex = on_excluded;
    }
    // An exception must not escape into Asio's loop (it would end the process): report it.
    try {
      if (cb)
        for (const auto& s : news.suspicions) cb(s);
      if (news.excluded_by >= 0 && ex) ex(news.excluded_by);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ftcc: heartbeat: a callback threw: %s\n", e.what());
    }
  }

  // The lowest live rank on the suspect's host fences it.
  bool i_am_fencer(const MuHeld&, const PeerAddress& suspect) const {
    if (suspect.host_id.empty() || suspect.host_id != host_id) return false;
    for (const auto& [r, p] : known)
      if (r < my_rank && p.host_id == host_id && !suspected.count(r)) return false;
    return true;
  }

  // --- the period ---

  void tick() {
    timer.expires_after(opt.period);
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      beat_and_watch();
      tick();
    });
  }

  void beat_and_watch() {
    News news;
    {
      std::lock_guard<std::mutex> lock(mu);
      const auto now = Clock::now();
      if (now - last_tick > opt.timeout / 2) {
        // This thread did not run for a long time: the process was stopped or starved. Give every
        // peer a full timeout again; if the others excluded this rank meanwhile, their replies say so.
        ++st.stalls;
        for (auto& [r, t] : watch_since) t = now;
      }
      last_tick = now;
      if (excluded) return;  // the owner stops the process; say nothing more
      for (int r : links.send_to) send(lock, r);
      std::vector<int> silent;
      for (int r : links.watch_ranks)
        if (now - heard(lock, r) > opt.timeout) silent.push_back(r);
      for (const auto& h : links.watch_hosts) {
        Clock::time_point latest{};
        for (int r : h) latest = std::max(latest, heard(lock, r));
        if (now - latest > opt.timeout) silent.insert(silent.end(), h.begin(), h.end());
      }
      if (!silent.empty()) learn(lock, silent, my_rank, now, news);
    }
    deliver(news);
  }
};

Heartbeat::Heartbeat(int my_rank, const std::string& bind_ip, HeartbeatOptions options)
    : impl_(std::make_unique<Impl>(my_rank, bind_ip, options)) {}

Heartbeat::~Heartbeat() {
  try {
    stop();
  } catch (const std::exception& e) {  // a destructor must not throw
    std::fprintf(stderr, "ftcc: heartbeat: stopping failed: %s\n", e.what());
  }
}

PeerAddress Heartbeat::local_address() const {
  PeerAddress a;
  a.rank = impl_->my_rank;
  a.host = impl_->host;
  a.host_id = impl_->host_id;
  const auto ep = impl_->socket.local_endpoint();
  a.ip = ep.address().to_string();
  a.port = ep.port();
  a.pid = static_cast<int>(getpid());
  a.start_time = process_start_time(a.pid);
  return a;
}

void Heartbeat::start(const std::vector<PeerAddress>& peers, const Secret& secret, std::uint64_t job_id) {
  FTCC_INVARIANT(!impl_->running) << "Heartbeat::start called twice";
  impl_->secret = secret;
  impl_->job_id = job_id;
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->known[impl_->my_rank] = local_address();
    for (const auto& p : peers) {
      if (p.rank == impl_->my_rank) continue;
      impl_->known[p.rank] = p;
      impl_->endpoints[p.rank] = udp::endpoint(boost::asio::ip::make_address(p.ip), p.port);
    }
    impl_->last_tick = now;
    impl_->relink(lock, now);  // a peer gets one full timeout from start before it can be suspected
  }
  impl_->running = true;
  impl_->receive();
  impl_->tick();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

void Heartbeat::stop() {
  if (!impl_ || !impl_->running) return;
  boost::asio::post(impl_->io, [this] {
    boost::system::error_code ignored;
    impl_->timer.cancel();
    impl_->socket.cancel(ignored);
    impl_->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->running = false;
}

void Heartbeat::add(const PeerAddress& p) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (p.rank == impl_->my_rank) return;
  impl_->known[p.rank] = p;
  impl_->endpoints[p.rank] = udp::endpoint(boost::asio::ip::make_address(p.ip), p.port);
  impl_->watch_since[p.rank] = Clock::now();  // one full timeout before it can be suspected, as at start
  impl_->relink(lock, Clock::now());
}

void Heartbeat::remove(int rank) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (rank == impl_->my_rank || !impl_->suspected.insert(rank).second) return;
  impl_->suspect_order.push_back(rank);
  impl_->relink(lock, Clock::now());
}

std::vector<int> Heartbeat::suspected() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return {impl_->suspected.begin(), impl_->suspected.end()};
}

void Heartbeat::set_progress(std::uint32_t entered_calls) {
  impl_->progress.store(entered_calls, std::memory_order_relaxed);
}

int Heartbeat::peer_behind(std::uint32_t entered_calls) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Header h{};
  impl_->minima(lock, h);
  if (h.job_min < entered_calls && h.job_min_rank != kNobody && static_cast<int>(h.job_min_rank) != impl_->my_rank &&
      !impl_->suspected.count(static_cast<int>(h.job_min_rank)))
    return static_cast<int>(h.job_min_rank);
  return -1;
}

void Heartbeat::set_on_suspect(SuspectCallback cb) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->on_suspect = std::move(cb);
}

void Heartbeat::set_on_excluded(ExcludedCallback cb) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->on_excluded = std::move(cb);
}

HeartbeatStats Heartbeat::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->st;
}

std::string Heartbeat::host_identity() { return comm::host_identity(); }

Secret Heartbeat::random_secret() {
  Secret s{};
  size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    FTCC_CHECK_T(::ftcc::Error, n > 0) << "getrandom failed: " << std::strerror(errno);  // NOLINT(concurrency-mt-unsafe): fatal path, before the thread starts
    got += static_cast<size_t>(n);
  }
  return s;
}

}  // namespace ftcc::recovery
