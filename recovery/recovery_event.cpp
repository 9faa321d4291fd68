#include "ftcc/recovery/recovery_event.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ftcc::recovery {

nlohmann::json RecoveryEvent::to_json() const {
  nlohmann::json j;
  j["event"] = "recovery";
  j["step"] = step;
  j["failed"] = failed;
  j["survivors"] = survivors;
  j["culprits"] = culprits;
  j["old_size"] = old_size;
  j["new_size"] = new_size;
  j["committed_min"] = committed_min;
  j["committed_max"] = committed_max;
  j["cause"] = cause;
  j["attempts"] = attempts;
  j["detect_ms"] = detect_ms >= 0 ? nlohmann::json(detect_ms) : nlohmann::json(nullptr);
  j["revoke_ms"] = revoke_ms;
  j["shrink_ms"] = shrink_ms;
  j["agree_ms"] = agree_ms;
  if (transfer_bytes > 0) {
    j["transfer_bytes"] = transfer_bytes;
    j["transfer_ms"] = transfer_ms;
  }
  if (respawns_left >= 0) {
    j["respawned"] = respawned;
    j["respawn_ms"] = respawn_ms;
    j["respawns_left"] = respawns_left;
    if (!respawn_error.empty()) j["respawn_error"] = respawn_error;
  }
  if (spares_left >= 0) {
    j["joined"] = joined;
    j["spares_left"] = spares_left;
    j["heal_ms"] = heal_ms;
  }
  j["resync_ms"] = resync_ms;
  j["total_ms"] = total_ms;
  return j;
}

RecoveryEvent RecoveryEvent::from_json(const nlohmann::json& j) {
  RecoveryEvent e;
  auto get = [&](const char* key, auto& field) {
    if (j.contains(key) && !j.at(key).is_null()) field = j.at(key).get<std::decay_t<decltype(field)>>();
  };
  get("step", e.step);
  get("failed", e.failed);
  get("survivors", e.survivors);
  get("culprits", e.culprits);
  get("old_size", e.old_size);
  get("new_size", e.new_size);
  get("committed_min", e.committed_min);
  get("committed_max", e.committed_max);
  get("cause", e.cause);
  get("attempts", e.attempts);
  get("detect_ms", e.detect_ms);
  get("revoke_ms", e.revoke_ms);
  get("shrink_ms", e.shrink_ms);
  get("agree_ms", e.agree_ms);
  get("transfer_bytes", e.transfer_bytes);
  get("transfer_ms", e.transfer_ms);
  get("respawned", e.respawned);
  get("respawn_ms", e.respawn_ms);
  get("respawns_left", e.respawns_left);
  get("respawn_error", e.respawn_error);
  get("joined", e.joined);
  get("spares_left", e.spares_left);
  get("heal_ms", e.heal_ms);
  get("resync_ms", e.resync_ms);
  get("total_ms", e.total_ms);
  return e;
}

std::string RecoveryEvent::summary() const {
  std::string who;
  for (size_t i = 0; i < culprits.size(); ++i) who += (i ? "; " : "") + culprits[i];
  char buf[256];
  std::snprintf(buf, sizeof buf, " at step %lld: %d -> %d ranks in %.1f ms (detect %s, revoke %.1f, shrink %.1f, agree %.1f, resync %.1f)",
                static_cast<long long>(step), old_size, new_size, total_ms,
                detect_ms >= 0 ? (std::to_string(std::lround(detect_ms)) + " ms").c_str() : "n/a",
                revoke_ms, shrink_ms, agree_ms, resync_ms);
  std::string healed;
  if (!joined.empty()) {
    auto list = [](const std::vector<int>& v) {
      std::string s;
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s;
    };
    std::vector<int> spares;
    for (int r : joined)
      if (std::find(respawned.begin(), respawned.end(), r) == respawned.end()) spares.push_back(r);
    std::vector<int> started;
    for (int r : joined)
      if (std::find(respawned.begin(), respawned.end(), r) != respawned.end()) started.push_back(r);
    if (!spares.empty()) healed += "; hot spare" + std::string(spares.size() > 1 ? "s " : " ") + list(spares) + " joined";
    if (!started.empty()) {
      char t[64];
      std::snprintf(t, sizeof t, " (respawned in %.0f ms)", respawn_ms);
      healed += "; new process" + std::string(started.size() > 1 ? "es " : " ") + list(started) + t + " joined";
    }
    healed += " (" + std::to_string(spares_left) + " spare(s) left";
    if (respawns_left >= 0) healed += ", " + std::to_string(respawns_left) + " respawn(s) left";
    healed += ", heal " + std::to_string(std::lround(heal_ms)) + " ms";
    if (transfer_bytes > 0) {
      char t[96];
      std::snprintf(t, sizeof t, ", state %.2f MB in %.1f ms", static_cast<double>(transfer_bytes) / 1e6, transfer_ms);
      healed += t;
    }
    healed += ")";
  } else if (spares_left == 0 && new_size < old_size) {
    healed = !respawn_error.empty() ? "; respawn failed (" + respawn_error + "): shrunk"
                                    : "; no hot spare or respawn left: shrunk";
  }
  // A recovery with no rank lost: a rank revoked the group on purpose (train/replica_verifier.hpp).
  const std::string what = failed.empty() ? "recovered with no rank lost (" + cause + ")" : "recovered from failure of " + who;
  return what + buf + healed + (attempts > 1 ? " [" + std::to_string(attempts) + " attempts]" : "");
}

}  // namespace ftcc::recovery
