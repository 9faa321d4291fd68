// recovery/respawn.cpp: new processes that fill places no spare was left for (ResilientGroup,
// GroupOptions::respawns; the protocol is at the top of recovery/resilient_group.hpp).
//
// The survivors, inside a recovery (ResilientGroup::heal), and the new processes, in their
// ResilientGroup constructor, make these calls in this order:
//   survivors                                      new processes
//   MPI_Comm_spawn(this program, k) on the pool
//   MPI_Intercomm_merge(low)                       MPI_Intercomm_merge(high)
//   hand-over on the merged communicator: header, secret, slots, pool members, peers, agreed
//   table, the recovery event so far (broadcasts from its rank 0), then every process's record
//   (allgather)
//   MPIX_Comm_agree on the old pool: did every survivor get this far?
//   broadcast of the verdict (and the ULFM-call count) on the merged communicator
//   the merged communicator is the pool            the constructor returns (a spare with a
//   (or, on "no": revoked and dropped)             pending join), or throws on "no"
// After that the new processes are spares of the recovery in progress: the heal plan places them.
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/mpi_check.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/group_internals.hpp"
#include "ftcc/recovery/heal_plan.hpp"
#include "ftcc/recovery/mpi_ft_comm.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX, for the spawned processes' environment

namespace ftcc::recovery {
namespace {

// The fixed part of the hand-over, one broadcast.
enum Header : std::size_t {
  kJobId, kInitialTraining, kInitialPool, kOriginals, kRespawnsLeft, kStep, kTableRows, kTableCells,
  kFaultNs, kOldPool, kEventBytes, kHeaderWords
};

// This program and its arguments (/proc/self/cmdline; the executable by /proc/self/exe, so a
// relative argv[0] works from any folder).
std::vector<std::string> own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find('\0', at);
    argv.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  FTCC_CHECK_T(::ftcc::Error, n > 0 && !argv.empty()) << "respawn: cannot read this program's command line from /proc/self";
  argv[0].assign(exe, static_cast<std::size_t>(n));
  return argv;
}

// What the new processes inherit, newline-separated for Open MPI's PMIX_ENVAR spawn key: the
// FTCC_* variables (job folder, terminal), OMPI_MCA_* and PMIX_MCA_* (ULFM on) and the sanitizers'
// options. (PMIx's datastore is the runtime's choice, not the new process's: under a sanitizer
// the whole job runs with PMIX_MCA_gds=hash, tests/reliability/sanitizers.sh.)
std::string inherited_environment() {
  std::string out;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.find('\n') != std::string::npos) continue;
    // Not FTCC_OOB_ADDR: it names this host's address, and a new process may run on another.
    const bool ours = (v.rfind("FTCC_", 0) == 0 && v.rfind("FTCC_OOB_ADDR=", 0) != 0) || v.rfind("OMPI_MCA_", 0) == 0 ||
                      v.rfind("PMIX_MCA_", 0) == 0 || v.rfind("ASAN_OPTIONS=", 0) == 0 ||
                      v.rfind("UBSAN_OPTIONS=", 0) == 0 || v.rfind("TSAN_OPTIONS=", 0) == 0 ||
                      v.rfind("LSAN_OPTIONS=", 0) == 0;
    if (ours) out += (out.empty() ? "" : "\n") + v;
  }
  return out;
}

// What a new process needs of the job's story, as text: the recovery so far (with the spares and
// processes already placed in earlier attempts), the events before it, and who holds the state.
std::string story(const RecoveryEvent& ev, const std::vector<RecoveryEvent>& history, const std::vector<int>& holders) {
  nlohmann::json j;
  j["event"] = ev.to_json();
  j["event"]["joined"] = ev.joined;  // to_json writes these only once the recovery knows its end
  j["event"]["respawned"] = ev.respawned;
  j["history"] = nlohmann::json::array();
  for (const auto& e : history) j["history"].push_back(e.to_json());
  j["holders"] = holders;
  std::string s = j.dump();
  s.resize((s.size() + 7) / 8 * 8, ' ');
  return s;
}

std::vector<std::int64_t> as_words(const std::vector<int>& v) { return {v.begin(), v.end()}; }

}  // namespace

int ResilientGroup::new_processes_lost() const {
  int n = 0;
  for (const auto& ev : events_)
    for (int r : ev.failed) n += static_cast<std::size_t>(r) >= initial_pool_;
  return n;
}

std::size_t ResilientGroup::max_originals() const {
  return initial_pool_ + static_cast<std::size_t>(std::max(0, opt_.respawns));
}

namespace {

// MPI_Comm_spawn of k copies of this program (its arguments, environment and folder) from the
// pool, merged with it (the pool low, the new processes high). Throws CommError on failure.
MPI_Comm spawn_and_merge(MPI_Comm pool, int k) {
  const std::vector<std::string> command = own_command();
  std::vector<char*> args;
  for (std::size_t i = 1; i < command.size(); ++i) args.push_back(const_cast<char*>(command[i].c_str()));
  args.push_back(nullptr);
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  const std::string env = inherited_environment();
  if (!env.empty()) MPI_Info_set(info, "PMIX_ENVAR", env.c_str());
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd)) MPI_Info_set(info, "wdir", cwd);
  MPI_Comm inter = MPI_COMM_NULL;
  std::vector<int> codes(static_cast<std::size_t>(k), MPI_SUCCESS);
  const int rc = MPI_Comm_spawn(command[0].c_str(), args.data(), k, info, 0, pool, &inter, codes.data());
  MPI_Info_free(&info);
  FTCC_MPI_CHECK(rc, pool, "MPI_Comm_spawn");
  for (int c : codes) FTCC_MPI_CHECK(c, pool, "MPI_Comm_spawn (a new process)");
  MPI_Comm merged = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPI_Intercomm_merge(inter, 0, &merged), inter, "MPI_Intercomm_merge");
  MPI_Comm_free(&inter);
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  return merged;
}

void revoke_merged(comm::Communicator& m) {
  try {
    comm::revoke(m.raw());
  } catch (const std::exception&) {
  }
}

}  // namespace

bool ResilientGroup::respawn(int k, RecoveryClock& clock, RecoveryEvent& ev, const AgreedTable& table) {
  clock.start_phase();
  respawns_left_ -= k;  // spent whether it works or not: a spawn that keeps failing must not loop
  if (pool_->communicator() == nullptr) return false;  // a simulated process: respawn is not simulated
  const int old_pool = pool_->size();
  const std::size_t originals = peers_.size();
  std::unique_ptr<comm::Communicator> m;  // one object for the whole hand-over: its collectives' tags follow each other
  std::vector<WirePeer> records;
  std::string why;
  try {
    MPI_Comm merged = guarded("MPI_Comm_spawn", FaultPhase::shrink,
                              [&] { return spawn_and_merge(pool_->communicator()->raw(), k); });
    comm::CommOptions co;
    co.timeout_s = pool_->communicator()->timeout_s();
    m = std::make_unique<comm::Communicator>(merged, comm::Communicator::Ownership::take, co);
    records = hand_over(*m, ev, clock, table, old_pool);
  } catch (const std::exception& e) {  // a failure, no room for the new processes, a program that would not start, ...
    why = e.what();
  }
  const bool ok = why.empty();
  if (!ok && m) revoke_merged(*m);  // wake the processes still waiting in the hand-over
  const bool accepted = agree_on(ok);  // on the pool before the merge: the survivors alone
  ev.respawn_ms += clock.lap();
  if (m) {
    // The verdict, the ULFM-call count the new processes continue from, and the time it took.
    std::int64_t verdict[3] = {accepted ? 1 : 0, static_cast<std::int64_t>(ulfm_calls_),
                               std::bit_cast<std::int64_t>(ev.respawn_ms)};
    try {
      comm::broadcast(*m, verdict, 3, comm::DType::i64, 0);
    } catch (const std::exception&) {
      // a new process lost now is found by the next agreement on the merged pool
    }
  }
  if (!accepted) {
    if (m) revoke_merged(*m);
    if (pool_->rank() == 0 && opt_.verbose)
      std::fprintf(stderr, "ftcc: respawn of %d process(es) failed%s%s; the group shrinks instead\n", k,
                   why.empty() ? "" : ": ", why.c_str());
    return false;
  }
  // The new processes are original ranks originals, originals + 1, ... and spares of this recovery.
  for (int i = old_pool; i < static_cast<int>(records.size()); ++i) {
    PeerAddress p = detail::peer_of(records[static_cast<std::size_t>(i)]);
    p.rank = static_cast<int>(originals) + (i - old_pool);
    peers_.push_back(p);
    slots_.push_back(kSpare);
    pool_members_.push_back(p.rank);
    ev.respawned.push_back(p.rank);
    if (heartbeat_) heartbeat_->add(p);
  }
  pool_ = std::make_unique<MpiFtComm>(std::move(m));
  return true;
}

std::vector<WirePeer> ResilientGroup::hand_over(comm::Communicator& m, const RecoveryEvent& ev, const RecoveryClock& clock,
                                                const AgreedTable& table, int old_pool) {
  // The hand-over (the top of the file), from the merged communicator's rank 0, a survivor.
  // Sizes that differ between survivors (the event's text: each has its own timings) are the
  // root's, from the header.
  const std::string event = story(ev, events_, holders_);
  std::int64_t h[kHeaderWords] = {};
  h[kJobId] = static_cast<std::int64_t>(job_id_);
  h[kInitialTraining] = initial_training_;
  h[kInitialPool] = static_cast<std::int64_t>(initial_pool_);
  h[kOriginals] = static_cast<std::int64_t>(peers_.size());
  h[kRespawnsLeft] = respawns_left_;
  h[kStep] = ev.step;
  h[kTableRows] = table.rows();
  h[kTableCells] = static_cast<std::int64_t>(table.cells().size());
  h[kFaultNs] = clock.fault_ns >= 0 ? clock.fault_ns : clock.first_notice_ns;
  h[kOldPool] = old_pool;
  h[kEventBytes] = static_cast<std::int64_t>(event.size());
  comm::broadcast(m, h, kHeaderWords, comm::DType::i64, 0);
  std::int64_t secret[4];
  std::memcpy(secret, secret_.data(), sizeof secret);
  comm::broadcast(m, secret, 4, comm::DType::i64, 0);
  std::vector<std::int64_t> slots = as_words(slots_), members = as_words(pool_members_);
  comm::broadcast(m, slots.data(), slots.size(), comm::DType::i64, 0);
  comm::broadcast(m, members.data(), members.size(), comm::DType::i64, 0);
  std::vector<WirePeer> wire;
  for (const auto& p : peers_) wire.push_back(detail::wire_of(p));
  comm::broadcast(m, wire.data(), wire.size() * kWireWords, comm::DType::i64, 0);
  std::vector<std::int64_t> cells = table.cells();
  cells.resize(static_cast<std::size_t>(h[kTableCells]));
  comm::broadcast(m, cells.data(), cells.size(), comm::DType::i64, 0);
  std::string text = event;
  text.resize(static_cast<std::size_t>(h[kEventBytes]), ' ');
  comm::broadcast(m, text.data(), text.size() / 8, comm::DType::i64, 0);
  const WirePeer mine = detail::wire_of(peers_.at(static_cast<std::size_t>(my_original_rank_)));
  std::vector<WirePeer> records(static_cast<std::size_t>(m.size()));
  comm::allgather(m, &mine, records.data(), kWireWords, comm::DType::i64);
  return records;
}

void ResilientGroup::join_as_respawned(MPI_Comm parent_intercomm) {
  respawned_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm merged = MPI_COMM_NULL;
  FTCC_MPI_CHECK(MPI_Intercomm_merge(parent_intercomm, 1, &merged), parent_intercomm, "MPI_Intercomm_merge");
  MPI_Comm_free(&parent_intercomm);
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  comm::CommOptions co;
  co.timeout_s = opt_.comm_timeout_s;
  auto m = std::make_unique<comm::Communicator>(merged, comm::Communicator::Ownership::take, co);
  std::int64_t h[kHeaderWords] = {};
  comm::broadcast(*m, h, kHeaderWords, comm::DType::i64, 0);
  job_id_ = static_cast<std::uint64_t>(h[kJobId]);
  initial_training_ = static_cast<int>(h[kInitialTraining]);
  initial_pool_ = static_cast<std::size_t>(h[kInitialPool]);
  respawns_left_ = static_cast<int>(h[kRespawnsLeft]);
  const auto originals = static_cast<std::size_t>(h[kOriginals]);
  const int old_pool = static_cast<int>(h[kOldPool]);
  std::int64_t secret[4];
  comm::broadcast(*m, secret, 4, comm::DType::i64, 0);
  std::memcpy(secret_.data(), secret, sizeof secret);
  std::vector<std::int64_t> slots(originals), members(static_cast<std::size_t>(old_pool));
  comm::broadcast(*m, slots.data(), slots.size(), comm::DType::i64, 0);
  comm::broadcast(*m, members.data(), members.size(), comm::DType::i64, 0);
  std::vector<WirePeer> wire(originals);
  comm::broadcast(*m, wire.data(), wire.size() * kWireWords, comm::DType::i64, 0);
  auto join = std::make_unique<PendingJoin>(max_originals());
  std::vector<std::int64_t> cells(static_cast<std::size_t>(h[kTableCells]));
  comm::broadcast(*m, cells.data(), cells.size(), comm::DType::i64, 0);
  join->table.assign(static_cast<int>(h[kTableRows]), std::move(cells));
  std::string text(static_cast<std::size_t>(h[kEventBytes]), ' ');
  comm::broadcast(*m, text.data(), text.size() / 8, comm::DType::i64, 0);
  const auto j = nlohmann::json::parse(text);
  join->event = RecoveryEvent::from_json(j.at("event"));
  for (const auto& e : j.at("history")) events_.push_back(RecoveryEvent::from_json(e));
  holders_ = j.at("holders").get<std::vector<int>>();
  join->step = h[kStep];
  join->fault_ns = h[kFaultNs];

  my_original_rank_ = static_cast<int>(originals) + (m->rank() - old_pool);
  for (const auto& w : wire) peers_.push_back(detail::peer_of(w));
  slots_.assign(slots.begin(), slots.end());
  pool_members_.assign(members.begin(), members.end());
  // The recovery's membership before its first shrink: the survivors then, and those lost since.
  join->before = pool_members_;
  join->before.insert(join->before.end(), join->event.failed.begin(), join->event.failed.end());
  const std::string host = Heartbeat::host_identity();
  bool single_host = true;  // as bootstrap decides it: every process on this process's host
  for (const auto& p : peers_) single_host = single_host && p.host_id == host;
  const WirePeer mine_wire = create_heartbeat(single_host);
  std::vector<WirePeer> records(static_cast<std::size_t>(m->size()));
  comm::allgather(*m, &mine_wire, records.data(), kWireWords, comm::DType::i64);
  for (int i = old_pool; i < m->size(); ++i) {
    PeerAddress p = detail::peer_of(records[static_cast<std::size_t>(i)]);
    p.rank = static_cast<int>(originals) + (i - old_pool);
    peers_.push_back(p);
    slots_.push_back(kSpare);
    pool_members_.push_back(p.rank);
  }
  std::int64_t verdict[3] = {0, 0, 0};
  comm::broadcast(*m, verdict, 3, comm::DType::i64, 0);
  if (verdict[0] != 1)
    throw ftcc::Error("the survivors could not take this new process in (a respawn that failed on some survivor)");
  ulfm_calls_ = static_cast<std::uint32_t>(verdict[1]);
  join->event.respawn_ms = std::bit_cast<double>(verdict[2]);
  for (int i = old_pool; i < m->size(); ++i) join->event.respawned.push_back(static_cast<int>(originals) + (i - old_pool));
  pool_ = std::make_unique<MpiFtComm>(std::move(m));
  members_ = training_members(slots_);
  event_dir_ = detail::event_dir_of(job_id_);
  ::mkdir(event_dir_.c_str(), 0700);
  injector_ = FaultInjector(opt_.faults, my_original_rank_, event_dir_);
  join_ = std::move(join);
  start_services();
}

}  // namespace ftcc::recovery
