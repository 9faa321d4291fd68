// recovery/group_bootstrap.cpp: ResilientGroup's start (bootstrap): the options checked, the
// job's identity and secret, every process's address and heartbeat socket, the slots and the pool.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/recovery/group_internals.hpp"
#include "ftcc/recovery/heal_plan.hpp"
#include "ftcc/recovery/process_state.hpp"
#include "ftcc/recovery/mpi_failure_notice.hpp"
#include "ftcc/recovery/mpi_ft_comm.hpp"
#include "ftcc/recovery/resilient_group.hpp"

namespace ftcc::recovery {
namespace {

std::string my_hostname() {
  char buf[64] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// The first local IPv4 address matching `want`: an interface name (eth0) or a CIDR (10.0.0.0/8).
std::optional<std::string> local_ipv4_matching(const std::string& want) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  const auto slash = want.find('/');
  in_addr net{};
  int bits = -1;
  if (slash != std::string::npos && inet_pton(AF_INET, want.substr(0, slash).c_str(), &net) == 1)
    bits = std::atoi(want.c_str() + slash + 1);
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const in_addr ip = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr;
    bool match = want == a->ifa_name;
    if (bits >= 0 && bits <= 32) {
      const std::uint32_t mask = bits == 0 ? 0 : htonl(~std::uint32_t{0} << (32 - bits));
      match = (ip.s_addr & mask) == (net.s_addr & mask);
    }
    char text[INET_ADDRSTRLEN];
    if (match && inet_ntop(AF_INET, &ip, text, sizeof text) != nullptr) found = text;
  }
  freeifaddrs(list);
  return found;
}

// Address for the heartbeat socket: loopback when the whole job is on this host; else the one the
// user names (FTCC_OOB_ADDR, an address; FTCC_OOB_IF, an interface or CIDR); else the network MPI
// was told to use (btl_tcp_if_include: interfaces or CIDRs); else the first non-loopback IPv4
// address our hostname resolves to.
std::string heartbeat_bind_address(bool single_host, const GroupEnvironment& env) {
  if (single_host) return "127.0.0.1";
  if (!env.oob_addr.empty()) return env.oob_addr;
  if (!env.oob_if.empty()) {
    if (auto ip = local_ipv4_matching(env.oob_if)) return *ip;
    throw ftcc::InvalidArgument("ResilientGroup: FTCC_OOB_IF='" + env.oob_if + "' matches no IPv4 address of host '" +
                                my_hostname() + "'; name an interface (eth0) or a network (10.0.0.0/8) this host has");
  }
  if (!env.btl_tcp_if_include.empty()) {
    const std::string& list = env.btl_tcp_if_include;
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      if (auto ip = local_ipv4_matching(list.substr(at, comma - at))) return *ip;
      at = comma + 1;
    }
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  const std::string host = my_hostname();
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
    for (addrinfo* p = res; p; p = p->ai_next) {
      char ip[64];
      if (getnameinfo(p->ai_addr, p->ai_addrlen, ip, sizeof ip, nullptr, 0, NI_NUMERICHOST) == 0 &&
          std::strncmp(ip, "127.", 4) != 0) {
        freeaddrinfo(res);
        return ip;
      }
    }
    freeaddrinfo(res);
  }
  throw ftcc::InvalidArgument("ResilientGroup: the job spans several hosts but hostname '" + host +
                              "' resolves to no non-loopback IPv4 address for the heartbeat; set "
                              "FTCC_OOB_ADDR to this host's address on the job's network, or FTCC_OOB_IF to its interface");
}

}  // namespace

namespace detail {

// Options that cannot work, refused before any communication (so identically on every rank).
void validate_options(const GroupOptions& o, int world) {
  using ms = std::chrono::milliseconds;
  if (o.hang_timeout.count() < 0) throw ftcc::InvalidArgument("hang timeout must be >= 0 (0 turns the heartbeat off)");
  if (o.hang_timeout.count() > 0) {
    const ms period = o.heartbeat_period.count() > 0 ? o.heartbeat_period : std::clamp(o.hang_timeout / 8, ms(20), ms(1000));
    const ms least = std::max(ms(100), 4 * period);
    if (o.hang_timeout < least)
      throw ftcc::InvalidArgument("hang timeout " + std::to_string(o.hang_timeout.count()) + " ms is too short for a heartbeat every " +
                                  std::to_string(period.count()) + " ms: healthy ranks would be fenced; use at least " +
                                  std::to_string(least.count()) + " ms, or 0 to turn the heartbeat off");
  }
  if (o.spares < 0 || o.spares >= world)
    throw ftcc::InvalidArgument("spares " + std::to_string(o.spares) + ": the job has " + std::to_string(world) +
                                " process(es) and at least one must train; use 0 to " + std::to_string(world - 1) +
                                " spares (the last ones of the job wait as hot spares)");
  if (o.spares > 0 && o.allow_without_ulfm)
    throw ftcc::InvalidArgument("hot spares need ULFM fault tolerance: without it a lost rank ends the job and no spare "
                                "can take its place; drop the spares or run with ULFM (tools/ftcc-run)");
  // New processes (respawns) are the original ranks after the job's: they can be named too.
  const int ranks = world + std::max(0, o.respawns);
  for (const auto& f : o.faults)
    if (f.rank >= ranks)
      throw ftcc::InvalidArgument("fault spec '" + f.text + "' names rank " + std::to_string(f.rank) + ", but the job has " +
                                  std::to_string(ranks) + " rank(s) (0-" + std::to_string(ranks - 1) + "): it would never fire");
}


}  // namespace detail

void ResilientGroup::bootstrap(MPI_Comm parent) {
  // A send abandoned after a failure can complete with an error later, when no communicator is
  // attached to it any more; MPI raises such errors on MPI_COMM_SELF (MPI-4) or MPI_COMM_WORLD,
  // whose default handler aborts the process. Make them return instead.
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  comm::CommOptions co;
  co.timeout_s = opt_.comm_timeout_s;
  comm_ = std::make_unique<MpiFtComm>(std::make_unique<comm::Communicator>(comm::Communicator::duplicate(parent, co)));
  comm::Communicator& world = *comm_->communicator();
  my_original_rank_ = world.rank();
  const int n = world.size();
  members_.resize(static_cast<size_t>(n));
  std::iota(members_.begin(), members_.end(), 0);

  // Job id and heartbeat secret: made by rank 0, shared through our broadcast.
  std::int64_t words[5] = {0, 0, 0, 0, 0};
  if (world.rank() == 0) {
    const Secret s = Heartbeat::random_secret();
    std::memcpy(&words[1], s.data(), s.size());
    // The job id travels in clear in every heartbeat: random on its own, nothing derived from
    // the secret.
    const Secret id = Heartbeat::random_secret();
    std::uint64_t v = 0;
    std::memcpy(&v, id.data(), sizeof v);
    words[0] = static_cast<std::int64_t>(v & 0x7fffffffffffffffULL);
  }
  comm::broadcast(world, words, 5, comm::DType::i64, 0);
  job_id_ = static_cast<std::uint64_t>(words[0]);
  std::memcpy(secret_.data(), &words[1], secret_.size());

  // Host identities first: they decide which address the heartbeat binds to. Identities, not
  // hostnames: containers on several machines may share a hostname.
  constexpr size_t kId = sizeof(WirePeer::host_id);
  std::vector<char> hosts(kId * static_cast<size_t>(n), 0);
  char my_host[kId] = {0};
  std::strncpy(my_host, Heartbeat::host_identity().c_str(), sizeof my_host - 1);
  comm::allgather(world, my_host, hosts.data(), kId / 8, comm::DType::i64);
  bool single_host = true;
  for (int r = 0; r < n; ++r) single_host = single_host && std::strncmp(&hosts[kId * static_cast<size_t>(r)], my_host, kId) == 0;

  const WirePeer mine = create_heartbeat(single_host);
  std::vector<WirePeer> all(static_cast<size_t>(n));
  comm::allgather(world, &mine, all.data(), kWireWords, comm::DType::i64);
  peers_.clear();
  for (const auto& w : all) peers_.push_back(detail::peer_of(w));
  initial_pool_ = peers_.size();
  initial_training_ = n - opt_.spares;
  respawns_left_ = opt_.respawns;

  event_dir_ = detail::event_dir_of(job_id_);
  ::mkdir(event_dir_.c_str(), 0700);
  injector_ = FaultInjector(opt_.faults, my_original_rank_, event_dir_);
  form_pool();
  start_services();
}

void ResilientGroup::form_pool() {
  // Slots: original rank r < n - spares trains in slot r; the others are hot spares.
  const int n = static_cast<int>(members_.size());
  slots_.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) slots_[static_cast<size_t>(r)] = r < n - opt_.spares ? r : kSpare;
  if (opt_.spares > 0 || opt_.respawns > 0) {  // a pool: spares wait in it, new processes join it
    pool_ = std::move(comm_);
    pool_members_ = members_;
    form_training_group();
    holders_ = members_;
  } else {
    install_fault_hook();
  }
}

WirePeer ResilientGroup::create_heartbeat(bool single_host) {
  if (!single_host && opt_.hang_timeout.count() == 0 && my_original_rank_ == 0) {
    if (!env_.ulfm_detector)
      std::fprintf(stderr, "ftcc: warning: the job spans several hosts and the heartbeat is off (hang timeout 0): a host "
                           "that crashes or drops off the network is noticed only when TCP gives up (minutes). Keep the "
                           "heartbeat on (--hang-timeout), or run with FTCC_DETECTOR_TIMEOUT=S (ULFM's detector)\n");
  }
  if (opt_.hang_timeout.count() > 0) {
    HeartbeatOptions ho;
    ho.timeout = opt_.hang_timeout;
    ho.period = opt_.heartbeat_period.count() > 0
                    ? opt_.heartbeat_period
                    : std::clamp(opt_.hang_timeout / 8, std::chrono::milliseconds(20), std::chrono::milliseconds(1000));
    ho.fence = opt_.fence;
    const std::string bind_ip = heartbeat_bind_address(single_host, env_);
    detector_ = opt_.detector ? opt_.detector(my_original_rank_, bind_ip, ho)
                              : std::make_unique<Heartbeat>(my_original_rank_, bind_ip, ho);
    if (!detector_) throw InvalidArgument("GroupOptions::detector returned no detector (rank " + std::to_string(my_original_rank_) + ")");
  }
  PeerAddress local;
  if (detector_) {
    local = detector_->local_address();
  } else {
    local.host = my_hostname();
    local.host_id = Heartbeat::host_identity();
    local.pid = static_cast<int>(getpid());
    local.start_time = process_start_time(local.pid);
  }
  local.rank = my_original_rank_;
  if (auto name = my_mpi_process_name()) {
    local.mpi_nspace = name->nspace;
    local.mpi_rank = name->rank;
  }
  return detail::wire_of(local);
}

}  // namespace ftcc::recovery
