#include "ftcc/train/metrics_server.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <list>
#include <sstream>
#include <thread>

#include "ftcc/base/error.hpp"

namespace ftcc::train {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kMaxConnections = 16;
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

}  // namespace

std::string prometheus_text(const TrainingMetrics& m) {
  std::ostringstream os;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    os << "# HELP ftcc_" << name << ' ' << help << "\n# TYPE ftcc_" << name << ' ' << type << "\nftcc_" << name
       << ' ' << value << "\n";
  };
  metric("step", "gauge", "Last completed global training step.", m.step);
  metric("loss", "gauge", "Training loss of the last step.", m.loss);
  metric("world_size", "gauge", "Ranks in the current group.", m.world_size);
  metric("recoveries_total", "counter", "Recoveries from rank failures since start.", m.recoveries_total);
  metric("last_recovery_ms", "gauge", "Duration of the last recovery in milliseconds.", m.last_recovery_ms);
  metric("samples_per_second", "gauge", "Training throughput over the last reporting window.", m.samples_per_s);
  metric("samples_seen_total", "counter", "Samples consumed by committed steps.", m.samples_seen);
  metric("spares_waiting", "gauge", "Hot spares waiting to take a lost rank's place.", m.spares_waiting);
  metric("spares_joined_total", "counter", "Hot spares that took a lost rank's place since start.", m.spares_joined_total);
  metric("last_state_transfer_bytes", "gauge", "State streamed to newcomers in the last recovery, in bytes.",
         m.last_state_transfer_bytes);
  metric("replica_mismatches_total", "counter",
         "Replica verifications whose digests differed (silent data corruption found) since start.",
         m.replica_mismatches_total);
  metric("corrupt_ranks_excluded_total", "counter", "Ranks outvoted by their replicas and excluded since start.",
         m.corrupt_ranks_excluded_total);
  metric("state_at_rest_mismatches_total", "counter",
         "Ranks whose parameters or optimizer state changed between the optimizer step and their next use since start.",
         m.state_at_rest_mismatches_total);
  metric("reduction_mismatches_total", "counter",
         "Gradient sums whose result was not the sum of the contributions (--verify-reductions) since start.",
         m.reduction_mismatches_total);
  metric("stragglers_reported_total", "counter", "Stragglers found (slow at --straggler-window checks in a row) since start.",
         m.stragglers_reported_total);
  metric("stragglers_evicted_total", "counter", "Stragglers evicted (--evict-stragglers) since start.",
         m.stragglers_evicted_total);
  if (!m.slowdown.empty()) {
    os << "# HELP ftcc_straggler_slowdown A rank's own compute time per step over the median's, at the last check.\n"
       << "# TYPE ftcc_straggler_slowdown gauge\n";
    for (const auto& [rank, x] : m.slowdown) os << "ftcc_straggler_slowdown{rank=\"" << rank << "\"} " << x << "\n";
  }
  return os.str();
}

struct MetricsServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  std::mutex mu;
  TrainingMetrics metrics;
  std::atomic<std::uint64_t> served{0}, bad{0};

  asio::steady_timer backoff{io};

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        serve(std::make_shared<tcp::socket>(std::move(socket)));
        accept();
        return;
      }
      // Out of descriptors (EMFILE, ENFILE) or another error: try again later, not at once (an
      // immediate retry fails again and spins a core).
      backoff.expires_after(kAcceptBackoff);
      backoff.async_wait([this](beast::error_code e) {
        if (e != asio::error::operation_aborted) accept();
      });
    });
  }

  struct Conn {
    beast::tcp_stream stream;
    beast::flat_buffer buffer{8192};
    http::request_parser<http::empty_body> parser;
    http::response<http::string_body> res;
    explicit Conn(tcp::socket s) : stream(std::move(s)) { parser.header_limit(8192); }
  };
  // The open connections, oldest first: at most kMaxConnections; a new one closes the oldest, so
  // idle clients cannot hold the process's descriptors (which a checkpoint needs) or keep a
  // scraper out.
  std::list<std::weak_ptr<Conn>> open;

  void serve(std::shared_ptr<tcp::socket> socket) {
    auto c = std::make_shared<Conn>(std::move(*socket));
    open.remove_if([](const std::weak_ptr<Conn>& w) { return w.expired(); });
    while (open.size() >= kMaxConnections) {
      if (auto old = open.front().lock()) {
        beast::error_code ignored;
        old->stream.socket().close(ignored);  // its pending read or write ends (operation_aborted)
      }
      open.pop_front();
    }
    open.push_back(c);
    c->stream.expires_after(std::chrono::seconds(5));
    http::async_read(c->stream, c->buffer, c->parser, [this, c](beast::error_code ec, std::size_t) {
      if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
          !c->stream.socket().is_open())
        return;
      if (ec) {
        ++bad;
        respond(c, http::status::bad_request, "bad request\n", 11);
        return;
      }
      const auto& req = c->parser.get();
      if (req.method() != http::verb::get && req.method() != http::verb::head) {
        respond(c, http::status::method_not_allowed, "only GET\n", req.version());
      } else if (req.target() != "/metrics") {
        respond(c, http::status::not_found, "try /metrics\n", req.version());
      } else {
        TrainingMetrics snap;
        {
          std::lock_guard<std::mutex> lock(mu);
          snap = metrics;
        }
        ++served;
        respond(c, http::status::ok, prometheus_text(snap), req.version());
      }
    });
  }

  void respond(const std::shared_ptr<Conn>& c, http::status status, std::string body, unsigned version) {
    c->res = http::response<http::string_body>(status, version);
    c->res.set(http::field::server, "ftcc");
    c->res.set(http::field::content_type, status == http::status::ok ? "text/plain; version=0.0.4" : "text/plain");
    c->res.keep_alive(false);
    c->res.body() = std::move(body);
    c->res.prepare_payload();
    http::async_write(c->stream, c->res, [c](beast::error_code, std::size_t) {
      beast::error_code ignored;
      c->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    });
  }
};

MetricsServer::MetricsServer(const std::string& bind_address, std::uint16_t port) : impl_(std::make_unique<Impl>()) {
  beast::error_code ec;
  const auto addr = asio::ip::make_address(bind_address, ec);
  FTCC_CHECK(!ec) << "--metrics-bind '" << bind_address << "' is not an IP address";
  const tcp::endpoint ep(addr, port);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  FTCC_CHECK(!ec) << "metrics server cannot bind " << bind_address << ":" << port << ": " << ec.message()
                  << " (choose another --metrics-port)";
  impl_->acceptor.listen();
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

MetricsServer::~MetricsServer() {
  asio::post(impl_->io, [this] {
    beast::error_code ignored;
    impl_->backoff.cancel();
    impl_->acceptor.close(ignored);
    impl_->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t MetricsServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void MetricsServer::update(const TrainingMetrics& m) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->metrics = m;
}

std::uint64_t MetricsServer::requests_served() const { return impl_->served.load(); }
std::uint64_t MetricsServer::bad_requests() const { return impl_->bad.load(); }

}  // namespace ftcc::train
