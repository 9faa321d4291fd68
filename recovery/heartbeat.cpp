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
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {
namespace {

using boost::asio::ip::udp;
using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'F', 'T', 'C', 'C', 'H', 'B', '1', 0};

// Wire format, 64 bytes, little-endian host order (all ranks of a job share an ABI).
struct Datagram {
  char magic[8];
  std::uint64_t job_id;
  std::uint32_t rank;
  std::uint32_t progress;  // the sender's count of entered ULFM calls (Heartbeat::set_progress)
  std::uint64_t seq;
  std::uint8_t mac[32];
};
static_assert(sizeof(Datagram) == 64);
constexpr size_t kSignedBytes = offsetof(Datagram, mac);

void sign(const Secret& key, Datagram& d) {
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(&d),
       kSignedBytes, d.mac, &len);
}

bool verify(const Secret& key, const Datagram& d) {
  std::uint8_t mac[32];
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(&d),
       kSignedBytes, mac, &len);
  return len == 32 && CRYPTO_memcmp(mac, d.mac, 32) == 0;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

struct Heartbeat::Impl {
  struct Watched {
    PeerAddress addr;
    udp::endpoint endpoint;
    Clock::time_point last_heard;
    std::uint64_t last_seq = 0;
    std::uint32_t progress = 0;
    bool suspected = false;
  };

  int my_rank;
  HeartbeatOptions opt;
  boost::asio::io_context io;
  udp::socket socket{io};
  boost::asio::steady_timer timer{io};
  std::thread thread;
  std::mutex mu;  // guards peers, stats, callback
  std::map<int, Watched> peers;
  Secret secret{};
  std::uint64_t job_id = 0;
  std::uint64_t seq = 0;
  std::atomic<std::uint32_t> progress{0};
  HeartbeatStats st;
  SuspectCallback on_suspect;
  Datagram rx{};
  udp::endpoint rx_from;
  std::string host = hostname();
  bool running = false;

  Impl(int rank, const std::string& ip, HeartbeatOptions o) : my_rank(rank), opt(o) {
    const auto addr = boost::asio::ip::make_address(ip);
    socket.open(addr.is_v4() ? udp::v4() : udp::v6());
    socket.bind(udp::endpoint(addr, 0));
  }

  void receive() {
    socket.async_receive_from(boost::asio::buffer(&rx, sizeof rx), rx_from,
                              [this](const boost::system::error_code& ec, size_t n) {
                                if (ec == boost::asio::error::operation_aborted) return;
                                if (!ec) accept(n);
                                receive();
                              });
  }

  void accept(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    auto reject = [&] { ++st.rejected; };
    if (n != sizeof(Datagram) || std::memcmp(rx.magic, kMagic, sizeof kMagic) != 0 || rx.job_id != job_id)
      return reject();
    if (!verify(secret, rx)) return reject();
    auto it = peers.find(static_cast<int>(rx.rank));
    if (it == peers.end() || rx.seq <= it->second.last_seq) return reject();  // stranger, removed, or replay
    it->second.last_seq = rx.seq;
    it->second.progress = rx.progress;
    it->second.last_heard = Clock::now();
    ++st.accepted;
  }

  void tick() {
    timer.expires_after(opt.period);
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      beat_and_watch();
      tick();
    });
  }

  void beat_and_watch() {
    std::vector<std::pair<PeerAddress, double>> suspects;
    {
      std::lock_guard<std::mutex> lock(mu);
      Datagram d{};
      std::memcpy(d.magic, kMagic, sizeof kMagic);
      d.job_id = job_id;
      d.rank = static_cast<std::uint32_t>(my_rank);
      d.seq = ++seq;
      d.progress = progress.load(std::memory_order_relaxed);
      sign(secret, d);
      const auto now = Clock::now();
      for (auto& [rank, w] : peers) {
        boost::system::error_code ignored;
        socket.send_to(boost::asio::buffer(&d, sizeof d), w.endpoint, 0, ignored);
        ++st.sent;
        const double silent = std::chrono::duration<double>(now - w.last_heard).count();
        if (!w.suspected && now - w.last_heard > opt.timeout) {
          w.suspected = true;
          ++st.suspected;
          suspects.emplace_back(w.addr, silent);
        }
      }
    }
    for (auto& [addr, silent] : suspects) handle_suspect(addr, silent);
  }

  // The lowest-ranked non-suspected rank on the suspect's host fences it.
  bool i_am_fencer(const PeerAddress& suspect) {
    if (suspect.host != host) return false;
    for (auto& [rank, w] : peers)
      if (rank < my_rank && w.addr.host == host && !w.suspected) return false;
    return true;
  }

  void handle_suspect(const PeerAddress& addr, double silent) {
    bool fenced = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      fenced = opt.fence && i_am_fencer(addr);
    }
    if (fenced) {
      // Never kill a recycled pid: the start time must be the one recorded at start.
      if (addr.pid > 0 && Heartbeat::process_start_time(addr.pid) == addr.start_time && addr.start_time != 0) {
        ::kill(addr.pid, SIGKILL);
        std::lock_guard<std::mutex> lock(mu);
        ++st.fenced;
      } else {
        fenced = false;
      }
    }
    SuspectCallback cb;
    {
      std::lock_guard<std::mutex> lock(mu);
      cb = on_suspect;
    }
    if (cb) cb(addr, silent, fenced);
  }
};

Heartbeat::Heartbeat(int my_rank, const std::string& bind_ip, HeartbeatOptions options)
    : impl_(std::make_unique<Impl>(my_rank, bind_ip, options)) {}

Heartbeat::~Heartbeat() { stop(); }

PeerAddress Heartbeat::local_address() const {
  PeerAddress a;
  a.rank = impl_->my_rank;
  a.host = impl_->host;
  const auto ep = impl_->socket.local_endpoint();
  a.ip = ep.address().to_string();
  a.port = ep.port();
  a.pid = static_cast<int>(getpid());
  a.start_time = process_start_time(a.pid);
  return a;
}

void Heartbeat::start(const std::vector<PeerAddress>& peers, const Secret& secret, std::uint64_t job_id) {
  FTCC_CHECK(!impl_->running) << "Heartbeat::start called twice";
  impl_->secret = secret;
  impl_->job_id = job_id;
  const auto now = Clock::now();
  for (const auto& p : peers) {
    if (p.rank == impl_->my_rank) continue;
    Impl::Watched w;
    w.addr = p;
    w.endpoint = udp::endpoint(boost::asio::ip::make_address(p.ip), p.port);
    w.last_heard = now;  // a peer gets one full timeout from start before it can be suspected
    impl_->peers[p.rank] = w;
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
  Impl::Watched w;
  w.addr = p;
  w.endpoint = udp::endpoint(boost::asio::ip::make_address(p.ip), p.port);
  w.last_heard = Clock::now();  // one full timeout before it can be suspected, as at start
  impl_->peers[p.rank] = w;
}

void Heartbeat::remove(int rank) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->peers.erase(rank);
}

void Heartbeat::set_progress(std::uint32_t entered_calls) {
  impl_->progress.store(entered_calls, std::memory_order_relaxed);
}

int Heartbeat::peer_behind(std::uint32_t entered_calls) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& [rank, w] : impl_->peers)
    if (!w.suspected && w.last_seq > 0 && w.progress < entered_calls) return rank;
  return -1;
}

void Heartbeat::set_on_suspect(SuspectCallback cb) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->on_suspect = std::move(cb);
}

HeartbeatStats Heartbeat::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->st;
}

Secret Heartbeat::random_secret() {
  Secret s{};
  size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    FTCC_CHECK(n > 0) << "getrandom failed: " << std::strerror(errno);  // NOLINT(concurrency-mt-unsafe): fatal path, before the thread starts
    got += static_cast<size_t>(n);
  }
  return s;
}

namespace {

enum class Stat { ok, no_such_process, unreadable };

// /proc/<pid>/stat: state (field 3) and start time (field 22). no_such_process only when the
// kernel says so (ENOENT/ESRCH); any other failure (EMFILE, hidepid's EACCES, a short read) is
// unreadable, which confirms nothing.
Stat read_stat(int pid, char& state, std::uint64_t& start) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return errno == ENOENT || errno == ESRCH ? Stat::no_such_process : Stat::unreadable;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  const bool read_error = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (read_error) return err == ESRCH ? Stat::no_such_process : Stat::unreadable;  // exited while reading
  const std::string line(buf, n);
  // Field 2 (comm) may contain spaces and parentheses: parse after the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return Stat::unreadable;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  if (!(rest >> state)) return Stat::unreadable;
  // rest is now past field 3 (state); start time is field 22.
  for (int i = 4; i < 22 && rest >> field; ++i) {
  }
  if (!(rest >> start)) return Stat::unreadable;
  return Stat::ok;
}

}  // namespace

std::uint64_t Heartbeat::process_start_time(int pid) {
  char state = 0;
  std::uint64_t start = 0;
  return read_stat(pid, state, start) == Stat::ok ? start : 0;
}

bool Heartbeat::process_gone(int pid, std::uint64_t start_time) {
  if (pid <= 0 || start_time == 0) return false;  // unknown identity: cannot confirm anything
  char state = 0;
  std::uint64_t start = 0;
  switch (read_stat(pid, state, start)) {
    case Stat::no_such_process: return true;
    case Stat::unreadable: return false;
    case Stat::ok: break;
  }
  return start != start_time || state == 'Z' || state == 'X';
}

}  // namespace ftcc::recovery
