#include "ftcc/recovery/recovery_event.hpp"

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
  if (spares_left >= 0) {
    j["joined"] = joined;
    j["spares_left"] = spares_left;
    j["heal_ms"] = heal_ms;
  }
  j["resync_ms"] = resync_ms;
  j["total_ms"] = total_ms;
  return j;
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
    healed = "; hot spare";
    healed += joined.size() > 1 ? "s " : " ";
    for (size_t i = 0; i < joined.size(); ++i) healed += (i ? ", " : "") + std::to_string(joined[i]);
    healed += " joined (" + std::to_string(spares_left) + " left, heal " + std::to_string(std::lround(heal_ms)) + " ms";
    if (transfer_bytes > 0) {
      char t[96];
      std::snprintf(t, sizeof t, ", state %.2f MB in %.1f ms", static_cast<double>(transfer_bytes) / 1e6, transfer_ms);
      healed += t;
    }
    healed += ")";
  } else if (spares_left == 0 && new_size < old_size) {
    healed = "; no hot spare left: shrunk";
  }
  return "recovered from failure of " + who + buf + healed + (attempts > 1 ? " [" + std::to_string(attempts) + " attempts]" : "");
}

}  // namespace ftcc::recovery
