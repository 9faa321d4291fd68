#include "ftcc/recovery/resilient_group.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>

#include "ftcc/base/env_number.hpp"
#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/group_internals.hpp"
#include "ftcc/recovery/heal_plan.hpp"
#include "ftcc/recovery/mpi_failure_notice.hpp"
#include "ftcc/recovery/quorum_lost.hpp"
#include "ftcc/recovery/quorum_rule.hpp"

namespace ftcc::recovery {
namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

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
std::string heartbeat_bind_address(bool single_host) {
  if (single_host) return "127.0.0.1";
  if (const char* env = std::getenv("FTCC_OOB_ADDR"); env && *env) return env;  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  if (const char* env = std::getenv("FTCC_OOB_IF"); env && *env) {  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
    if (auto ip = local_ipv4_matching(env)) return *ip;
    throw ftcc::InvalidArgument(std::string("ResilientGroup: FTCC_OOB_IF='") + env + "' matches no IPv4 address of host '" +
                                my_hostname() + "'; name an interface (eth0) or a network (10.0.0.0/8) this host has");
  }
  if (const char* env = std::getenv("OMPI_MCA_btl_tcp_if_include"); env && *env) {  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
    std::string list = env;
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

// See "Exit guard" in the header. on_exit (not atexit) so the record can say the status.
void exit_without_finalize_guard(int status, void*) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) job_record::exited(status);
  if (!initialized || finalized) return;
  std::fprintf(stderr, "ftcc: process exiting with status %d without MPI_Finalize: turning it into a process "
                       "failure (SIGKILL) so the survivors can recover\n", status);
  std::fflush(stderr);
  job_record::left("exited with status " + std::to_string(status) + " without MPI_Finalize");
  std::raise(SIGKILL);
}

// FTCC_ULFM_TIMEOUT_S is parsed like a flag (base/env_number.hpp): a bad value is refused, before
// any communication, on every rank alike.
double ulfm_timeout_of(double opt) {
  if (opt != 0) return opt;
  return env_seconds("FTCC_ULFM_TIMEOUT_S", 60, 0.001, 1e6);
}

// Options that cannot work, refused before any communication (so identically on every rank).
void validate(const GroupOptions& o, int world) {
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
  (void)ulfm_timeout_of(o.ulfm_timeout_s);  // throws on a bad FTCC_ULFM_TIMEOUT_S
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

}  // namespace

ResilientGroup::ResilientGroup(MPI_Comm parent, GroupOptions options) : opt_(std::move(options)) {
  int world = 0;
  MPI_Comm_size(parent, &world);
  MPI_Comm spawner = MPI_COMM_NULL;  // set in a process started by a respawn (recovery/respawn.cpp)
  MPI_Comm_get_parent(&spawner);
  if (spawner == MPI_COMM_NULL) validate(opt_, world);  // a new process's job was checked when it started
  if (!opt_.allow_without_ulfm) comm::require_ulfm("ResilientGroup (set GroupOptions::allow_without_ulfm to run without fault tolerance)");
  static const bool guard_installed = on_exit(exit_without_finalize_guard, nullptr) == 0;
  (void)guard_installed;
  if (spawner != MPI_COMM_NULL) {
    join_as_respawned(spawner);
    return;
  }
  int parent_rank = 0;
  MPI_Comm_rank(parent, &parent_rank);
  job_record::joining(parent_rank);  // so a group that never forms names who did come up
  bootstrap(parent);
  // The first group on record: from now on a process of an earlier group is superseded.
  fence_.begin(job_id_, ulfm_members());
  job_record::formed(static_cast<int>(pool_members().size()));  // by every rank: one is enough
}

ResilientGroup::~ResilientGroup() {
  watchdog_.reset();
  deadline_.reset();
  if (heartbeat_) heartbeat_->stop();
  // Not after QuorumLost: the scratch folder is per job and host, and the majority that goes on
  // may share this host's /tmp (simulated hosts do).
  // Nor after Superseded: the job that went on without this process still uses it.
  if (comm_ && comm_->rank() == 0 && !event_dir_.empty() && !quorum_lost_ && !superseded_) {
    std::error_code ignored;
    std::filesystem::remove_all(event_dir_, ignored);
  }
}

void ResilientGroup::bootstrap(MPI_Comm parent) {
  // A send abandoned after a failure can complete with an error later, when no communicator is
  // attached to it any more; MPI raises such errors on MPI_COMM_SELF (MPI-4) or MPI_COMM_WORLD,
  // whose default handler aborts the process. Make them return instead.
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  comm::CommOptions co;
  co.timeout_s = opt_.comm_timeout_s;
  comm_ = std::make_unique<comm::Communicator>(comm::Communicator::duplicate(parent, co));
  my_original_rank_ = comm_->rank();
  const int n = comm_->size();
  members_.resize(static_cast<size_t>(n));
  std::iota(members_.begin(), members_.end(), 0);

  // Job id and heartbeat secret: made by rank 0, shared through our broadcast.
  std::int64_t words[5] = {0, 0, 0, 0, 0};
  if (comm_->rank() == 0) {
    const Secret s = Heartbeat::random_secret();
    std::memcpy(&words[1], s.data(), s.size());
    // The job id travels in clear in every heartbeat: random on its own, nothing derived from
    // the secret.
    const Secret id = Heartbeat::random_secret();
    std::uint64_t v = 0;
    std::memcpy(&v, id.data(), sizeof v);
    words[0] = static_cast<std::int64_t>(v & 0x7fffffffffffffffULL);
  }
  comm::broadcast(*comm_, words, 5, comm::DType::i64, 0);
  job_id_ = static_cast<std::uint64_t>(words[0]);
  std::memcpy(secret_.data(), &words[1], secret_.size());

  // Host identities first: they decide which address the heartbeat binds to. Identities, not
  // hostnames: containers on several machines may share a hostname.
  constexpr size_t kId = sizeof(WirePeer::host_id);
  std::vector<char> hosts(kId * static_cast<size_t>(n), 0);
  char my_host[kId] = {0};
  std::strncpy(my_host, Heartbeat::host_identity().c_str(), sizeof my_host - 1);
  comm::allgather(*comm_, my_host, hosts.data(), kId / 8, comm::DType::i64);
  bool single_host = true;
  for (int r = 0; r < n; ++r) single_host = single_host && std::strncmp(&hosts[kId * static_cast<size_t>(r)], my_host, kId) == 0;

  const WirePeer mine = create_heartbeat(single_host);
  std::vector<WirePeer> all(static_cast<size_t>(n));
  comm::allgather(*comm_, &mine, all.data(), kWireWords, comm::DType::i64);
  peers_.clear();
  for (const auto& w : all) peers_.push_back(detail::peer_of(w));
  initial_pool_ = peers_.size();
  initial_training_ = n - opt_.spares;
  respawns_left_ = opt_.respawns;

  event_dir_ = detail::event_dir_of(job_id_);
  ::mkdir(event_dir_.c_str(), 0700);
  injector_ = FaultInjector(opt_.faults, my_original_rank_, event_dir_);
  // Slots: original rank r < n - spares trains in slot r; the others are hot spares.
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
  start_services();
}

WirePeer ResilientGroup::create_heartbeat(bool single_host) {
  if (!single_host && opt_.hang_timeout.count() == 0 && my_original_rank_ == 0) {
    const char* detector = std::getenv("OMPI_MCA_mpi_ft_detector");  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
    if (detector == nullptr || (std::strcmp(detector, "true") != 0 && std::strcmp(detector, "1") != 0))
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
    heartbeat_ = std::make_unique<Heartbeat>(my_original_rank_, heartbeat_bind_address(single_host), ho);
  }
  PeerAddress local;
  if (heartbeat_) {
    local = heartbeat_->local_address();
  } else {
    local.host = my_hostname();
    local.host_id = Heartbeat::host_identity();
    local.pid = static_cast<int>(getpid());
    local.start_time = Heartbeat::process_start_time(local.pid);
  }
  local.rank = my_original_rank_;
  if (auto name = my_mpi_process_name()) {
    local.mpi_nspace = name->nspace;
    local.mpi_rank = name->rank;
  }
  return detail::wire_of(local);
}

void ResilientGroup::start_services() {
  if (heartbeat_) {
    // This process's name by value: the callback runs on the heartbeat thread, and peers_ may
    // grow meanwhile (respawn).
    const MpiProcessName me{peer(my_original_rank_).mpi_nspace, peer(my_original_rank_).mpi_rank};
    heartbeat_->set_on_suspect([this, me](const Suspicion& s) {
      // Runs on the heartbeat thread: no MPI here but the PMIx event (recovery/mpi_failure_notice.hpp).
      const PeerAddress& p = s.peer;
      const bool told_mpi = !p.mpi_nspace.empty() && !me.nspace.empty() &&
                            notify_process_failed(me, {p.mpi_nspace, p.mpi_rank});
      // The rank that found it silent, and the one that fenced it, say so; the others heard the
      // news and stay quiet (one line per suspect, not one per rank).
      if (s.reported_by != my_original_rank_ && !s.fenced_by_me) return;
      std::string what = s.reported_by == my_original_rank_
                             ? "silent for " + fmt_seconds(s.silent_s)
                             : "reported silent by rank " + std::to_string(s.reported_by);
      std::fprintf(stderr, "ftcc: rank %d (host %s, pid %d) %s at step %lld: %s%s\n", p.rank, p.host.c_str(), p.pid,
                   what.c_str(), static_cast<long long>(step_),
                   s.fenced_by_me ? ("fenced (SIGKILL) by rank " + std::to_string(my_original_rank_)).c_str()
                                  : "suspected (a rank on its host fences it; if none can, the others go on without it)",
                   told_mpi ? "; failed in MPI" : "");
    });
    heartbeat_->set_on_excluded([this](int by) {
      // The others suspected this rank (it was stopped, hung or cut off) and went on without it:
      // it must not take part in anything again. Self-fencing, as a rank on its host would do.
      const std::string why = "excluded by the survivors (rank " + std::to_string(by) +
                              " lists it as suspected): self-fenced (SIGKILL)";
      std::fprintf(stderr, "ftcc: rank %d %s at step %lld\n", my_original_rank_, why.c_str(), static_cast<long long>(step_));
      std::fflush(stderr);
      job_record::left(why);
      std::raise(SIGKILL);
    });
    std::vector<PeerAddress> alive;  // a new process is handed the lost ones too
    for (int r : pool_members()) alive.push_back(peers_.at(static_cast<size_t>(r)));
    heartbeat_->start(alive, secret_, job_id_);
  }
  job_record::started(my_original_rank_);
  const double ulfm_s = ulfm_timeout_of(opt_.ulfm_timeout_s);
  if (ulfm_s > 0)
    deadline_ = std::make_unique<CallDeadline>(
        std::chrono::milliseconds(static_cast<long long>(ulfm_s * 1000)), my_original_rank_,
        [this](std::uint64_t seq) { return heartbeat_ ? heartbeat_->peer_behind(static_cast<std::uint32_t>(seq)) : -1; });
  if (opt_.progress_timeout.count() > 0)
    watchdog_ = std::make_unique<ProgressWatchdog>(
        opt_.progress_timeout, "loop of rank " + std::to_string(my_original_rank_) + " (begin_step)",
        [] {
          job_record::left("progress watchdog: no step began within --progress-timeout");
          std::raise(SIGKILL);
        },
        [] { return comm::waits_in_progress() > 0; });
}

comm::Communicator& ResilientGroup::comm() {
  FTCC_CHECK(comm_) << "ResilientGroup::comm() on hot spare (rank " << my_original_rank_
                    << "): a spare has no training group until wait_as_spare() returns true";
  return *comm_;
}

bool ResilientGroup::reports() const {
  if (!pool_) return comm_ && comm_->rank() == 0;
  // From the slots, not the training group: inside a recovery (a job-level error) the group may be
  // the old one, whose rank 0 may be gone. The live process with the lowest slot speaks; with no
  // slot holder alive, the pool's rank 0.
  int best = -1, best_slot = std::numeric_limits<int>::max();
  for (int r : pool_members_) {
    const int s = slots_.at(static_cast<size_t>(r));
    if (s >= 0 && s < best_slot) best = r, best_slot = s;
  }
  return best >= 0 ? best == my_original_rank_ : pool_->rank() == 0;
}

int ResilientGroup::spares_left() const {
  return static_cast<int>(std::count(slots_.begin(), slots_.end(), kSpare));
}

void ResilientGroup::form_training_group() {
  const int slot = slots_.at(static_cast<size_t>(my_original_rank_));
  MPI_Comm out = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPI_Comm_split(pool_->raw(), slot >= 0 ? 0 : MPI_UNDEFINED, slot >= 0 ? slot : 0, &out), pool_->raw(),
                 "MPI_Comm_split");
  members_ = training_members(slots_);
  comm_.reset();
  if (out == MPI_COMM_NULL) return;  // a spare
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  comm::CommOptions co;
  co.timeout_s = pool_->timeout_s();
  comm_ = std::make_unique<comm::Communicator>(out, comm::Communicator::Ownership::take, co);
  install_fault_hook();
}

void ResilientGroup::install_fault_hook() {
  if (!injector_.enabled() || !comm_) return;  // free when off: no hook at all
  comm_->set_fault_hook([this](const char* op, int protocol_step) {
    if (auto phase = FaultInjector::phase_of_op(op)) injector_.in_phase(*phase, protocol_step);
  });
}

void ResilientGroup::begin_step(std::int64_t step) {
  step_ = step;
  if (watchdog_) watchdog_->kick();
  injector_.at_step(step);
}

const HeartbeatStats ResilientGroup::heartbeat_stats() const { return heartbeat_ ? heartbeat_->stats() : HeartbeatStats{}; }

const RecoveryEvent& ResilientGroup::recover(std::int64_t step, const std::string& cause) {
  comm::require_ulfm("ResilientGroup::recover");
  const auto clock = RecoveryClock::start();  // before the entry agreement, which waits for the others
  enter_protocol();                           // 0. revoke + entry agreement
  return recover_attempts(step, cause, clock);  // 1-4, until one attempt succeeds
}

// The flags of the agreements on the pool, ANDed: 0 "I am recovering" (recover, fail_job);
// bit 0 "done" (all_finished); bit 1 "the job is over" (run_job's last all_finished). A waiting
// spare contributes both bits, so it never changes the result, and leaves when it sees bit 1.
namespace {
constexpr unsigned kDone = 1u, kJobOver = 2u;
}  // namespace

bool ResilientGroup::all_finished(bool last) {
  if (!comm::has_ulfm()) return true;  // without ULFM no rank can be lost and still be waited for
  if (left_as_spare_) return true;     // wait_as_spare() already saw the job's last agreement
  const auto clock = RecoveryClock::start();
  // "done": matches the entry agreement of recover() (flag 0) on the ranks still working.
  const unsigned flag = last ? kDone | kJobOver : kDone;
  const auto a = guarded("MPIX_Comm_agree", FaultPhase::agree, [&] { return comm::agree_uniform(ulfm_raw(), flag); });
  if ((a.flag & kDone) != 0 && !a.failure_noticed) return true;
  recover_attempts(committed_step_, a.failure_noticed ? "a rank failed at the end of the loop"
                                                      : "a rank was still recovering at the end of the loop",
                   clock);
  return false;
}

bool ResilientGroup::wait_as_spare() {
  FTCC_CHECK(pool_ && !comm_) << "wait_as_spare() on rank " << my_original_rank_ << ", which is not a hot spare";
  if (join_) {  // a new process: the recovery that started it is waiting for it (recovery/respawn.cpp)
    const std::unique_ptr<PendingJoin> join = std::move(join_);
    recover_attempts(join->step, join->event.cause, RecoveryClock::start(), join.get());
    if (comm_) return true;
  }
  for (;;) {
    // Counted like the training ranks' agreement it matches, so the heartbeat shows this spare
    // as having entered it; no deadline: a spare may wait here for the whole run.
    injector_.spare_wait(spare_waits_++);
    const std::uint32_t seq = ++ulfm_calls_;
    if (heartbeat_) heartbeat_->set_progress(seq);
    const auto a = comm::agree_uniform_polled(pool_->raw(), kDone | kJobOver, [this] {
      if (watchdog_) watchdog_->kick();
    });
    if (!a.failure_noticed && a.flag == (kDone | kJobOver)) {
      left_as_spare_ = true;
      return false;
    }
    if (!a.failure_noticed && (a.flag & kDone) != 0) continue;  // the training ranks' end of loop: not the last
    recover_attempts(committed_step_, a.failure_noticed ? "a process failed (seen by a hot spare)"
                                                        : "the training ranks began a recovery",
                     RecoveryClock::start());
    if (comm_) return true;
  }
}

void ResilientGroup::fail_job(ExitStatus status, const std::string& message) {
  if (!comm::has_ulfm()) throw JobError(status, my_original_rank_, step_, message, false);
  pending_error_ = PendingError{status, message, step_};
  const auto clock = RecoveryClock::start();
  enter_protocol();
  recover_attempts(step_, "job error on rank " + std::to_string(my_original_rank_), clock);
  // Not reached while this rank lives: its error is in every agreed table, so the protocol throws.
  throw JobError(status, my_original_rank_, step_, message, false);
}

namespace {
void revoke_ignoring_errors(MPI_Comm c) {
  try {
    comm::revoke(c);
  } catch (const comm::CommError&) {
    // already revoked by a peer: the agreements and the shrink sort it out
  }
}
}  // namespace

void ResilientGroup::revoke_training() {
  if (comm_) revoke_ignoring_errors(comm_->raw());
}

void ResilientGroup::revoke_quietly() {
  revoke_training();
  if (pool_) revoke_ignoring_errors(pool_->raw());
}

void ResilientGroup::enter_protocol() {
  // The training group only: the spares wait in an agreement on the pool, which this one matches.
  revoke_training();
  // Entry agreement: matches the one of all_finished(), where ranks that already finished wait.
  guarded("MPIX_Comm_agree", FaultPhase::agree, [&] { return comm::agree_uniform(ulfm_raw(), 0u); });
}

const RecoveryEvent& ResilientGroup::recover_attempts(std::int64_t step, const std::string& cause,
                                                      RecoveryClock clock, PendingJoin* join) {
  RecoveryEvent ev;
  if (join) ev = join->event;  // a new process takes the recovery up where the survivors handed it over
  ev.step = step;
  ev.cause = cause;
  // The training group's size as every process knows it (a spare has no group of its own).
  if (!join) ev.old_size = pool_ ? static_cast<int>(members_.size()) : size();
  ev.my_old_rank = rank();
  const std::vector<int> before = join ? join->before : ulfm_members();
  AgreedTable table(max_originals());
  bool resume = join != nullptr;  // the first attempt is past step 3 already
  if (join) {
    table = std::move(join->table);
    clock.fault_ns = clock.first_notice_ns = join->fault_ns;
    injector_.observe_step(step);  // so recovery-phase faults can name a new process
  }
  // Each step makes the same ULFM calls on every survivor; a step that returns false did so
  // on all of them (its agreement says so), and all of them start the next attempt together.
  for (int attempt = std::max(1, ev.attempts);; ++attempt) {
    ev.attempts = attempt;
    if (!resume) {
      injector_.in_phase(FaultPhase::recovery, attempt);
      if (!shrink_group(clock, ev)) continue;                   // 1. revoke + shrink
      if (!agree_on_table(before, clock, table, ev)) continue;  // 2. allgather the table + agree
      describe_new_group(before, table, clock, ev);             //    the event, as every survivor sees it
      if (!comm_) {  // a spare: the step in flight is the one after the most advanced commit
        ev.step = table.committed_max() + 1;
        injector_.observe_step(ev.step);
      }
      check_quorum(ev, table);                                  // 3. quorum lost: throws QuorumLost
      if (!join) record_group();                                //    on record: a stale process stops here
      if (auto e = table.job_error()) throw *e;                 //    a job-level error: throws JobError
    }
    const bool may_respawn = !resume;
    resume = false;
    if (pool_ && !heal(clock, ev, table, may_respawn)) continue;  // spares (and respawns) take lost slots + agree
    if (pool_ && !join) record_group();                           // new processes on record (by the survivors)
    describe_training_group(table, ev);
    if (!run_hooks(step, attempt, clock, ev)) continue;       // 4. hooks + agree
    ev.total_ms = clock.total_ms();
    return publish(std::move(ev));
  }
}

bool ResilientGroup::shrink_group(RecoveryClock& clock, RecoveryEvent& ev) {
  // Revoke (again: harmless) so every survivor's pending operation on this communicator fails.
  clock.start_phase();
  revoke_quietly();
  ev.revoke_ms += clock.lap();
  comm::Shrunk s;
  try {
    s = guarded("MPIX_Comm_shrink", FaultPhase::shrink, [&] { return comm::shrink_and_translate(ulfm_raw()); });
  } catch (const comm::FaultDetected&) {
    ev.shrink_ms += clock.lap();
    return false;  // a failure during the shrink itself: try again
  }
  ev.shrink_ms += clock.lap();
  std::vector<int> now_members;
  for (int old_rank : s.kept) now_members.push_back(ulfm_members().at(static_cast<size_t>(old_rank)));
  comm::CommOptions co;
  co.timeout_s = pool().timeout_s();
  auto shrunk = std::make_unique<comm::Communicator>(s.comm, comm::Communicator::Ownership::take, co);
  if (pool_) {
    // The training group is re-formed from the new pool by heal(); until then the old one stays.
    pool_ = std::move(shrunk);
    pool_members_ = std::move(now_members);
    return true;
  }
  comm_ = std::move(shrunk);
  members_ = std::move(now_members);
  install_fault_hook();
  return true;
}

std::vector<int> ResilientGroup::lost_since(const std::vector<int>& before) const {
  std::vector<int> lost;
  const std::vector<int>& now = ulfm_members();
  for (int r : before)
    if (std::find(now.begin(), now.end(), r) == now.end()) lost.push_back(r);
  return lost;
}

bool ResilientGroup::agree_on_table(const std::vector<int>& before, RecoveryClock& clock, AgreedTable& table,
                                    RecoveryEvent& ev) {
  // A rank whose allgather failed revokes (so nobody waits for it there) and contributes 0.
  bool have_table = true;
  try {
    // The deaths this rank can confirm: lost ranks on its own host whose process is gone. A rank
    // fenced a moment ago (SIGKILL) may not have died yet, on a loaded machine: each gets until a
    // shared deadline of kConfirmWait to go (a live one, never killed, costs that wait once).
    constexpr auto kConfirmWait = std::chrono::milliseconds(500);
    const auto confirm_by = std::chrono::steady_clock::now() + kConfirmWait;
    std::vector<int> confirmed;
    const std::string& my_host = peer(my_original_rank_).host_id;
    for (int r : lost_since(before)) {
      const PeerAddress& p = peer(r);
      if (p.host_id == my_host && Heartbeat::wait_process_gone(p.pid, p.start_time, confirm_by)) confirmed.push_back(r);
    }
    const std::int64_t flags = comm_ && hooks_.empty() ? AgreedTable::kEnding : 0;
    table.gather(pool(), table.row_of(my_original_rank_, committed_step_, clock.notice_wall_ns,
                                      pending_error_ ? &*pending_error_ : nullptr, confirmed, flags));
  } catch (const comm::FaultDetected&) {
    have_table = false;
    revoke_quietly();
  }
  const bool all = agree_on(have_table);
  ev.agree_ms += clock.lap();
  return all;
}

void ResilientGroup::describe_new_group(const std::vector<int>& before, const AgreedTable& table,
                                        RecoveryClock& clock, RecoveryEvent& ev) {
  // New processes started in an earlier attempt of this recovery count as members too.
  std::vector<int> members_before = before;
  members_before.insert(members_before.end(), ev.respawned.begin(), ev.respawned.end());
  ev.failed = lost_since(members_before);
  ev.culprits.clear();
  for (int r : ev.failed) {
    const PeerAddress& p = peer(r);
    ev.culprits.push_back("rank " + std::to_string(r) + " on host " + p.host + " pid " + std::to_string(p.pid));
    if (heartbeat_) heartbeat_->remove(r);
  }
  clock.first_notice_ns = table.notice_ns(0);
  for (int i = 0; i < table.rows(); ++i) clock.first_notice_ns = std::min(clock.first_notice_ns, table.notice_ns(i));
  clock.fault_ns = -1;
  for (int r : ev.failed)
    if (auto t = FaultInjector::read_fault_time_ns(event_dir_, r))
      clock.fault_ns = clock.fault_ns < 0 ? *t : std::min(clock.fault_ns, *t);
  ev.detect_ms = clock.detect_ms();
}

void ResilientGroup::describe_training_group(const AgreedTable& table, RecoveryEvent& ev) {
  ev.survivors = members_;
  // A spare that joined in an attempt and was lost in a later one did not join.
  std::erase_if(ev.joined, [&](int r) { return std::find(members_.begin(), members_.end(), r) == members_.end(); });
  ev.new_size = static_cast<int>(members_.size());
  ev.my_new_rank = rank();
  ev.spares_left = pool_ ? spares_left() : -1;
  ev.respawns_left = opt_.respawns > 0 ? respawns_left_ : -1;
  // committed_min/max: the consistency point of the ranks that held state (a newcomer holds none:
  // its committed step, -1, is in ev.committed but not in them).
  ev.committed.assign(members_.size(), -1);
  ev.committed_min = std::numeric_limits<std::int64_t>::max();
  ev.committed_max = std::numeric_limits<std::int64_t>::min();
  for (size_t i = 0; i < members_.size(); ++i) {
    ev.committed[i] = table.committed_of(members_[i]);
    if (std::find(ev.joined.begin(), ev.joined.end(), members_[i]) != ev.joined.end()) continue;
    ev.committed_min = std::min(ev.committed_min, ev.committed[i]);
    ev.committed_max = std::max(ev.committed_max, ev.committed[i]);
  }
}

bool ResilientGroup::heal(RecoveryClock& clock, RecoveryEvent& ev, const AgreedTable& table, bool may_respawn) {
  clock.start_phase();
  // Past the end of the program's loop (a training rank without hooks) no newcomer can be given
  // the state: lost places are dropped, the spares keep waiting for the job's last agreement.
  const bool fill = !table.ending();
  HealPlan plan = plan_heal(slots_, pool_members_, holders_, fill);  // the same on every survivor
  if (fill && may_respawn && !plan.state_lost && !plan.dropped_slots.empty() && respawns_left_ > 0) {
    // Places no spare was left for: start new processes for them (recovery/respawn.cpp).
    if (respawn(std::min(static_cast<int>(plan.dropped_slots.size()), respawns_left_), clock, ev, table))
      plan = plan_heal(slots_, pool_members_, holders_, fill);
    clock.start_phase();
  }
  if (plan.state_lost) {
    std::string who;
    for (int r : ev.failed) who += (who.empty() ? "" : ", ") + std::to_string(r);
    throw JobError(ExitStatus::job_error, ev.failed.empty() ? -1 : ev.failed.front(), -1,  // the step: no survivor knows
                   "every process that held training state was lost (ranks " + who + "); the " +
                       std::to_string(pool_members_.size()) + " hot spare(s) alive hold none, so the job cannot go on",
                   true);
  }
  slots_ = plan.slots;  // before the split, on every survivor: a retry plans from here
  ev.joined.insert(ev.joined.end(), plan.joined.begin(), plan.joined.end());
  bool formed = true;
  try {
    guarded("MPI_Comm_split", FaultPhase::shrink, [&] {
      form_training_group();
      return 0;
    });
  } catch (const comm::FaultDetected&) {
    formed = false;
    revoke_quietly();
  }
  const bool all = agree_on(formed);
  ev.heal_ms += clock.lap();
  return all;
}

void ResilientGroup::check_quorum(const RecoveryEvent& ev, const AgreedTable& table) {
  QuorumInput in{ulfm_members(), ev.failed, {}};
  for (int r : ev.failed)
    if (table.confirmed_by_any(r)) in.confirmed.push_back(r);
  const QuorumDecision d = decide_quorum(in);
  if (d.go_on) return;
  quorum_lost_ = true;
  QuorumLost q(ulfm_members(), ev.failed, d.unconfirmed, d.old_size);
  job_record::quorum_lost(my_original_rank_, q.what());
  throw q;
}

bool ResilientGroup::run_hooks(std::int64_t step, int attempt, RecoveryClock& clock, RecoveryEvent& ev) {
  bool hooks_ok = true;
  transfer_bytes_ = 0;
  transfer_ms_ = 0;
  try {
    injector_.in_phase(FaultPhase::hooks, attempt);
    if (comm_)  // a spare still waiting holds no state for the hooks to restore
      for (auto& hook : hooks_) hook(*this, ev);
  } catch (const comm::FaultDetected&) {
    hooks_ok = false;
  } catch (const std::exception& e) {
    // Not a lost rank: an error in the hook's own work, which the next attempt reports as a
    // job-level error on every survivor.
    pending_error_ = PendingError{ExitStatus::job_error, std::string("in a recovery hook: ") + e.what(), step};
    hooks_ok = false;
  }
  if (!hooks_ok) revoke_quietly();
  const bool all = agree_on(hooks_ok);
  ev.resync_ms += clock.lap();
  ev.transfer_bytes = transfer_bytes_;
  ev.transfer_ms = transfer_ms_;
  return all;
}

bool ResilientGroup::agree_on(bool mine) {
  const auto a = guarded("MPIX_Comm_agree", FaultPhase::agree,
                         [&] { return comm::agree_uniform(ulfm_raw(), mine ? 1u : 0u); });
  return a.flag == 1 && !a.failure_noticed;  // the same decision on every survivor
}

void ResilientGroup::check_current(const std::string& what) const {
  try {
    fence_.check(job_id_, my_original_rank_, what);
  } catch (const Superseded&) {
    superseded_ = true;
    throw;
  }
}

// A new process does not record its group: it is not on record until the survivors record the
// group it joined (after heal, before the recovery's last agreement).
void ResilientGroup::record_group() {
  try {
    fence_.advance(job_id_, ulfm_members(), my_original_rank_);
  } catch (const Superseded&) {
    superseded_ = true;
    throw;
  }
}

const RecoveryEvent& ResilientGroup::publish(RecoveryEvent ev) {
  if (pool_) holders_ = members_;  // the training group now holds the state (the hooks ran)
  events_.push_back(std::move(ev));
  const RecoveryEvent& e = events_.back();
  if (rank() == 0) {
    if (opt_.verbose) {
      std::fprintf(stderr, "ftcc: %s\n", e.summary().c_str());
      std::fflush(stderr);
    }
    if (!opt_.event_log.empty()) {
      std::ofstream log(opt_.event_log, std::ios::app);
      log << e.to_json().dump() << "\n";
    }
  }
  return e;
}

}  // namespace ftcc::recovery
