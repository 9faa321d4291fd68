#include "ftcc/recovery/heartbeat_topology.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {
namespace {

struct Host {
  std::string id;
  std::vector<int> ranks;  // ascending
  std::vector<int> speakers() const {
    return {ranks.begin(), ranks.begin() + std::min<std::ptrdiff_t>(2, static_cast<std::ptrdiff_t>(ranks.size()))};
  }
};

// Hosts in ring order (by their lowest live rank), ranks ascending within each.
std::vector<Host> hosts_of(const std::vector<HeartbeatMember>& live) {
  std::map<std::string, std::vector<int>> by_id;
  std::set<int> seen;
  for (const auto& m : live) {
    if (!seen.insert(m.rank).second)
      throw ftcc::InvalidArgument("heartbeat_links: rank " + std::to_string(m.rank) + " is listed twice");
    by_id[m.host_id].push_back(m.rank);
  }
  std::vector<Host> hosts;
  for (auto& [id, ranks] : by_id) {
    std::sort(ranks.begin(), ranks.end());
    hosts.push_back({id, ranks});
  }
  std::sort(hosts.begin(), hosts.end(), [](const Host& a, const Host& b) { return a.ranks.front() < b.ranks.front(); });
  return hosts;
}

void append(std::vector<int>& to, const std::vector<int>& ranks, int except) {
  for (int r : ranks)
    if (r != except) to.push_back(r);
}

// Ring offsets 1..fanout on either side, each other host once.
std::vector<size_t> neighbours(size_t me, size_t n, int fanout) {
  std::vector<size_t> out;
  for (int d = 1; d <= fanout; ++d)
    for (size_t j : {(me + static_cast<size_t>(d)) % n, (me + n - static_cast<size_t>(d) % n) % n})
      if (j != me && std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  return out;
}

}  // namespace

HeartbeatLinks heartbeat_links(int me, const std::vector<HeartbeatMember>& live, int fanout) {
  if (fanout < 1) throw ftcc::InvalidArgument("heartbeat_links: fanout must be >= 1");
  const auto hosts = hosts_of(live);
  size_t mine = hosts.size();
  for (size_t h = 0; h < hosts.size(); ++h)
    if (std::binary_search(hosts[h].ranks.begin(), hosts[h].ranks.end(), me)) mine = h;
  if (mine == hosts.size()) throw ftcc::InvalidArgument("heartbeat_links: rank " + std::to_string(me) + " is not live");
  const Host& host = hosts[mine];
  const auto speakers = host.speakers();
  HeartbeatLinks l;
  l.speaker = std::find(speakers.begin(), speakers.end(), me) != speakers.end();
  if (l.speaker) {
    append(l.send_to, host.ranks, me);
    append(l.watch_ranks, host.ranks, me);
    append(l.news_to, host.ranks, me);
    for (size_t j : neighbours(mine, hosts.size(), fanout)) {
      append(l.send_to, hosts[j].speakers(), me);
      l.watch_hosts.push_back(hosts[j].ranks);
    }
    for (size_t j = 0; j < hosts.size(); ++j)
      if (j != mine) append(l.news_to, hosts[j].speakers(), me);
  } else {
    append(l.send_to, speakers, me);
    append(l.watch_ranks, speakers, me);
    append(l.news_to, speakers, me);
  }
  return l;
}

int remote_datagrams_per_period(const std::vector<HeartbeatMember>& live, const std::string& host_id, int fanout) {
  std::map<int, std::string> host_of;
  for (const auto& m : live) host_of[m.rank] = m.host_id;
  int n = 0;
  for (const auto& m : live) {
    if (m.host_id != host_id) continue;
    for (int to : heartbeat_links(m.rank, live, fanout).send_to)
      if (host_of.at(to) != host_id) ++n;
  }
  return n;
}

}  // namespace ftcc::recovery
