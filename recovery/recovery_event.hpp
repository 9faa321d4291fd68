// recovery/recovery_event.hpp: what one recovery did and how long each phase took.
//
// Timeline (ms): the failure (fault time when an injector recorded it, else the first notice)
//   -> first survivor notices (detect_ms) -> revoke (revoke_ms) -> shrink (shrink_ms)
//   -> agree on failed set and consistency point (agree_ms) -> re-sync hooks (resync_ms);
// total_ms spans failure to the end of the hooks. Ranks are in the job's original numbering.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftcc::recovery {

struct RecoveryEvent {
  std::int64_t step = -1;               // step in flight when the failure was noticed
  std::vector<int> failed;              // original ranks lost in this recovery
  std::vector<int> survivors;           // original ranks of the new group, in new-rank order
  std::vector<int> joined;              // hot spares that took a lost rank's place (original ranks)
  std::vector<int> respawned;           // of them, the processes started by this recovery (respawn)
  double respawn_ms = 0;                // MPI_Comm_spawn + merge + hand-over
  int respawns_left = -1;               // new processes the job may still start (-1: respawn off)
  std::string respawn_error;            // why this recovery's respawn failed (empty: none tried, or it worked)
  int spares_left = -1;                 // hot spares still waiting after it (-1: the job has none)
  std::int64_t transfer_bytes = 0;      // state streamed by the hooks (ResilientGroup::record_state_transfer)
  double transfer_ms = 0;
  std::vector<std::string> culprits;    // "rank 2 on host h pid 1234", one per failed rank
  int old_size = 0, new_size = 0;
  int my_old_rank = -1, my_new_rank = -1;
  std::int64_t committed_min = -1, committed_max = -1;  // agreed consistency point
  std::vector<std::int64_t> committed;  // last committed step of each new rank
  std::string cause;                    // the error that started it (op and message)
  int attempts = 1;                     // > 1 when a further failure hit the recovery itself
  double detect_ms = -1, revoke_ms = 0, shrink_ms = 0, agree_ms = 0, heal_ms = 0, resync_ms = 0, total_ms = 0;

  nlohmann::json to_json() const;
  // The inverse of to_json (the fields it writes; the rest keep their defaults): a process that
  // joins a job (recovery/respawn.cpp) receives the job's recovery history this way.
  static RecoveryEvent from_json(const nlohmann::json& j);
  // One line for humans: "recovered from failure of rank 2 (...) at step 40: 4 -> 3 ranks in 12.3 ms".
  std::string summary() const;
};

}  // namespace ftcc::recovery
