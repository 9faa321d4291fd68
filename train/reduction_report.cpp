#include "ftcc/train/reduction_report.hpp"

#include "ftcc/base/error.hpp"
#include "ftcc/train/rank_list.hpp"

namespace ftcc::train {

ReductionOutcome judge_reduction(const ReductionCheck& check, std::int64_t step, const std::vector<int>& original_of) {
  FTCC_INVARIANT(check.mismatch) << "judge_reduction: the sum was right";
  const auto orig = [&](int r) {
    FTCC_INVARIANT(r >= 0 && static_cast<std::size_t>(r) < original_of.size()) << "judge_reduction: rank " << r;
    return original_of[static_cast<std::size_t>(r)];
  };
  std::vector<int> wrong_at;
  for (int r : check.wrong_at) wrong_at.push_back(orig(r));
  ReductionOutcome o;
  o.event = {{"event", "reduction_mismatch"}, {"step", step}, {"buckets", check.buckets}, {"wrong_at", wrong_at}};
  o.line = "reduction check at step " + std::to_string(step) + ": the replicas' gradient sum (bucket(s) " +
           joined(check.buckets) + ") reached rank(s) " + joined(wrong_at) + " changed (corruption in transit)";
  if (check.repeated_clean) {
    o.event["repeated"] = "right";
    o.event["links"] = nlohmann::json::array();
    o.event["excluded"] = nlohmann::json::array();
    o.line += "; repeated from the kept contributions: right, used";
    return o;
  }
  o.event["repeated"] = "wrong";
  nlohmann::json links = nlohmann::json::array();
  std::string named;
  for (const auto& l : check.probe.bad_links) {
    links.push_back({orig(l.from), orig(l.to)});
    named += (named.empty() ? "" : ", ") + std::string("rank ") + std::to_string(orig(l.from)) + " -> rank " +
             std::to_string(orig(l.to));
  }
  o.event["links"] = links;
  o.line += ", and again when repeated; the link probe found " + (named.empty() ? std::string("no link changing data") : "data changed on " + named);
  if (check.probe.suspects.size() == 1) {
    o.action = ReductionOutcome::Action::exclude;
    o.excluded = orig(check.probe.suspects.front());
    o.event["excluded"] = {o.excluded};
    o.line += ": rank " + std::to_string(o.excluded) + " excluded; step " + std::to_string(step) + " is redone";
    o.why = "excluded: the data on its links (" + named + ") arrived changed in the replicas' gradient sum at step " +
            std::to_string(step) + ", again when repeated and in the link probe (corruption in transit); self-fenced (SIGKILL)";
    return o;
  }
  o.action = ReductionOutcome::Action::stop;
  o.event["excluded"] = nlohmann::json::array();
  std::vector<int> both;
  for (int r : check.probe.suspects) both.push_back(orig(r));
  o.line += both.empty() ? ": no single rank to exclude: stopping (check the network and memory of the ranks named)"
                         : ": rank(s) " + joined(both) + " equally suspect, no single rank to exclude: stopping (check the "
                                                          "network and memory of the ranks named)";
  return o;
}

}  // namespace ftcc::train
