// recovery/respawn.cpp: new processes that fill places no spare was left for (ResilientGroup,
// GroupOptions::respawns; the protocol is at the top of recovery/resilient_group.hpp).
//
// The survivors, inside a recovery (ResilientGroup::heal), and the new processes, in their
// ResilientGroup constructor, make these calls in this order, all through FtComm (so the
// simulation, recovery/simulation/, runs the same code: its spawn starts simulated processes):
//   survivors                                      new processes
//   spawn_merged(k) on the pool (MPI_Comm_spawn of this program, MPI_Intercomm_merge)
//                                                  the merged communicator from their start
//   hand-over on the merged communicator: header, secret, slots, pool members, peers, agreed
//   table, the recovery event so far (broadcasts from its rank 0), then every process's record
//   (allgather)
//   agree on the old pool: did every survivor get this far?
//   broadcast of the verdict (and the ULFM-call count) on the merged communicator
//   the merged communicator is the pool            the constructor returns (a spare with a
//   (or, on "no": revoked and dropped)             pending join), or throws on "no"
// After that the new processes are spares of the recovery in progress: the heal plan places them.
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/group_internals.hpp"
#include "ftcc/recovery/heal_plan.hpp"
#include "ftcc/recovery/mpi_ft_comm.hpp"

namespace ftcc::recovery {
namespace {

// The fixed part of the hand-over, one broadcast.
enum Header : std::size_t {
  kJobId, kInitialTraining, kInitialPool, kOriginals, kRespawnsLeft, kStep, kTableRows, kTableCells,
  kFaultNs, kOldPool, kEventBytes, kHeaderWords
};

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

bool ResilientGroup::respawn(int k, RecoveryClock& clock, RecoveryEvent& ev, const AgreedTable& table) {
  clock.start_phase();
  respawns_left_ -= k;  // spent whether it works or not: a spawn that keeps failing must not loop
  const int old_pool = pool_->size();
  const std::size_t originals = peers_.size();
  std::unique_ptr<FtComm> m;  // one object for the whole hand-over: its collectives' tags follow each other
  std::vector<WirePeer> records;
  std::string why;
  try {
    m = guarded("MPI_Comm_spawn", FaultPhase::shrink, [&] { return pool_->spawn_merged(k); });
    records = hand_over(*m, ev, clock, table, old_pool);
  } catch (const std::exception& e) {  // a failure, no room for the new processes, a program that would not start, ...
    why = e.what();
  }
  const bool ok = why.empty();
  if (!ok && m) m->revoke();  // wake the processes still waiting in the hand-over
  const bool accepted = agree_on(ok);  // on the pool before the merge: the survivors alone
  ev.respawn_ms += clock.lap();
  if (m) {
    // The verdict, the ULFM-call count the new processes continue from, and the time it took.
    std::int64_t verdict[3] = {accepted ? 1 : 0, static_cast<std::int64_t>(ulfm_calls_),
                               std::bit_cast<std::int64_t>(ev.respawn_ms)};
    try {
      m->broadcast(verdict, 3, 0);
    } catch (const std::exception&) {
      // a new process lost now is found by the next agreement on the merged pool
    }
  }
  if (!accepted) {
    if (m) m->revoke();
    ev.respawn_error = why.empty() ? "it failed on another survivor" : why;
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
    if (detector_) detector_->add(p);
  }
  pool_ = std::move(m);
  return true;
}

namespace {
// A broadcast from rank 0 of bytes whose size is a multiple of 8 (the hand-over pads its text),
// through int64 words.
void broadcast_bytes(FtComm& m, void* data, std::size_t bytes) {
  std::vector<std::int64_t> w(bytes / 8);
  std::memcpy(w.data(), data, bytes);
  m.broadcast(w.data(), w.size(), 0);
  std::memcpy(data, w.data(), bytes);
}
// Every member's record, in rank order.
std::vector<WirePeer> allgather_records(FtComm& m, const WirePeer& mine) {
  std::vector<std::int64_t> w(kWireWords), all(kWireWords * static_cast<std::size_t>(m.size()));
  std::memcpy(w.data(), &mine, sizeof mine);
  m.allgather(w.data(), all.data(), kWireWords);
  std::vector<WirePeer> out(static_cast<std::size_t>(m.size()));
  std::memcpy(out.data(), all.data(), out.size() * sizeof(WirePeer));
  return out;
}
}  // namespace

std::vector<WirePeer> ResilientGroup::hand_over(FtComm& m, const RecoveryEvent& ev, const RecoveryClock& clock,
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
  m.broadcast(h, kHeaderWords, 0);
  broadcast_bytes(m, secret_.data(), sizeof secret_);
  std::vector<std::int64_t> slots = as_words(slots_), members = as_words(pool_members_);
  m.broadcast(slots.data(), slots.size(), 0);
  m.broadcast(members.data(), members.size(), 0);
  std::vector<WirePeer> wire;
  for (const auto& p : peers_) wire.push_back(detail::wire_of(p));
  broadcast_bytes(m, wire.data(), wire.size() * sizeof(WirePeer));
  std::vector<std::int64_t> cells = table.cells();
  cells.resize(static_cast<std::size_t>(h[kTableCells]));
  m.broadcast(cells.data(), cells.size(), 0);
  std::string text = event;
  text.resize(static_cast<std::size_t>(h[kEventBytes]), ' ');
  broadcast_bytes(m, text.data(), text.size());
  const WirePeer mine = detail::wire_of(peers_.at(static_cast<std::size_t>(my_original_rank_)));
  return allgather_records(m, mine);
}

void ResilientGroup::join_as_respawned(std::unique_ptr<FtComm> m, bool simulated) {
  respawned_ = true;
  std::int64_t h[kHeaderWords] = {};
  m->broadcast(h, kHeaderWords, 0);
  job_id_ = static_cast<std::uint64_t>(h[kJobId]);
  initial_training_ = static_cast<int>(h[kInitialTraining]);
  initial_pool_ = static_cast<std::size_t>(h[kInitialPool]);
  respawns_left_ = static_cast<int>(h[kRespawnsLeft]);
  const auto originals = static_cast<std::size_t>(h[kOriginals]);
  const int old_pool = static_cast<int>(h[kOldPool]);
  broadcast_bytes(*m, secret_.data(), sizeof secret_);
  std::vector<std::int64_t> slots(originals), members(static_cast<std::size_t>(old_pool));
  m->broadcast(slots.data(), slots.size(), 0);
  m->broadcast(members.data(), members.size(), 0);
  std::vector<WirePeer> wire(originals);
  broadcast_bytes(*m, wire.data(), wire.size() * sizeof(WirePeer));
  auto join = std::make_unique<PendingJoin>(max_originals());
  std::vector<std::int64_t> cells(static_cast<std::size_t>(h[kTableCells]));
  m->broadcast(cells.data(), cells.size(), 0);
  join->table.assign(static_cast<int>(h[kTableRows]), std::move(cells));
  std::string text(static_cast<std::size_t>(h[kEventBytes]), ' ');
  broadcast_bytes(*m, text.data(), text.size());
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
  WirePeer mine_wire;
  if (simulated) {  // no heartbeat: the simulation's address of this process
    mine_wire = detail::wire_of(simulated_address(my_original_rank_));
  } else {
    const std::string host = Heartbeat::host_identity();
    bool single_host = true;  // as bootstrap decides it: every process on this process's host
    for (const auto& p : peers_) single_host = single_host && p.host_id == host;
    mine_wire = create_heartbeat(single_host);
  }
  const std::vector<WirePeer> records = allgather_records(*m, mine_wire);
  for (int i = old_pool; i < m->size(); ++i) {
    PeerAddress p = detail::peer_of(records[static_cast<std::size_t>(i)]);
    p.rank = static_cast<int>(originals) + (i - old_pool);
    peers_.push_back(p);
    slots_.push_back(kSpare);
    pool_members_.push_back(p.rank);
  }
  std::int64_t verdict[3] = {0, 0, 0};
  m->broadcast(verdict, 3, 0);
  if (verdict[0] != 1)
    throw ftcc::Error("the survivors could not take this new process in (a respawn that failed on some survivor)");
  ulfm_calls_ = static_cast<std::uint32_t>(verdict[1]);
  join->event.respawn_ms = std::bit_cast<double>(verdict[2]);
  for (int i = old_pool; i < m->size(); ++i) join->event.respawned.push_back(static_cast<int>(originals) + (i - old_pool));
  pool_ = std::move(m);
  members_ = training_members(slots_);
  join_ = std::move(join);
  if (simulated) return;
  event_dir_ = detail::event_dir_of(job_id_);
  ::mkdir(event_dir_.c_str(), 0700);
  injector_ = FaultInjector(opt_.faults, my_original_rank_, event_dir_);
  start_services();
}

}  // namespace ftcc::recovery
