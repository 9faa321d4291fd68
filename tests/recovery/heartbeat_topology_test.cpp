// Who beats to whom: speakers per host, a ring of hosts watched as a whole, symmetric links, news
// in two hops, and a host's traffic off the host that does not grow with the number of hosts.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/recovery/heartbeat_topology.hpp"

namespace fr = ftcc::recovery;

namespace {

std::vector<fr::HeartbeatMember> grid(int hosts, int per_host) {
  std::vector<fr::HeartbeatMember> m;
  for (int h = 0; h < hosts; ++h)
    for (int i = 0; i < per_host; ++i) m.push_back({h * per_host + i, "h" + std::to_string(h)});
  return m;
}

bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(HeartbeatTopology, OneHostIsAStarAroundTwoSpeakers) {
  const auto live = grid(1, 4);
  const auto l0 = fr::heartbeat_links(0, live), l2 = fr::heartbeat_links(2, live);
  EXPECT_TRUE(l0.speaker);
  EXPECT_EQ(l0.send_to, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(l0.watch_ranks, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(l0.watch_hosts.empty());
  EXPECT_FALSE(l2.speaker);
  EXPECT_EQ(l2.send_to, (std::vector<int>{0, 1}));
  EXPECT_EQ(l2.watch_ranks, (std::vector<int>{0, 1}));
}

TEST(HeartbeatTopology, LinksAreSymmetricAndNewsReachesEveryRank) {
  for (int hosts : {1, 2, 3, 4, 5, 9}) {
    for (int per : {1, 2, 3}) {
      auto live = grid(hosts, per);
      if (hosts > 2) live.erase(live.begin() + 1);  // a host that lost a rank
      std::map<int, fr::HeartbeatLinks> links;
      for (const auto& m : live) links[m.rank] = fr::heartbeat_links(m.rank, live);
      for (const auto& [a, la] : links) {
        for (int b : la.send_to) {
          const auto& lb = links.at(b);
          bool watched = has(lb.watch_ranks, a);
          for (const auto& h : lb.watch_hosts) watched = watched || has(h, a);
          EXPECT_TRUE(watched) << hosts << "x" << per << ": " << a << " beats to " << b << " but " << b << " does not watch it";
        }
        for (int b : la.watch_ranks) EXPECT_TRUE(has(links.at(b).send_to, a)) << b << " is watched by " << a << " but never beats to it";
        for (const auto& h : la.watch_hosts) {
          bool someone = false;
          for (int b : h) someone = someone || has(links.at(b).send_to, a);
          EXPECT_TRUE(someone) << "a host watched by " << a << " never beats to it";
        }
        // From a speaker (who watches other hosts) in two hops, from any rank in three.
        std::set<int> reached{a};
        for (int hop = 0; hop < (la.speaker ? 2 : 3); ++hop) {
          auto next = reached;
          for (int r : reached)
            for (int t : links.at(r).news_to) next.insert(t);
          reached = next;
        }
        EXPECT_EQ(reached.size(), live.size()) << hosts << "x" << per << ": news from " << a << " does not reach everyone";
      }
    }
  }
}

TEST(HeartbeatTopology, TrafficOffAHostDoesNotGrowWithTheHosts) {
  // 8 ranks per host, fanout 2: two speakers x two speakers x four neighbouring hosts = 16.
  for (int hosts : {5, 16, 64}) {
    const auto live = grid(hosts, 8);
    for (int h : {0, hosts / 2, hosts - 1})
      EXPECT_EQ(fr::remote_datagrams_per_period(live, "h" + std::to_string(h)), 16) << hosts << " hosts";
  }
  EXPECT_EQ(fr::remote_datagrams_per_period(grid(3, 8), "h0"), 8) << "3 hosts: two neighbours only";
  EXPECT_EQ(fr::remote_datagrams_per_period(grid(64, 1), "h0"), 4) << "one rank per host";
}

TEST(HeartbeatTopology, BadInputIsRefused) {
  auto live = grid(2, 2);
  EXPECT_THROW(fr::heartbeat_links(9, live), ftcc::InvalidArgument);
  live.push_back({1, "h1"});
  EXPECT_THROW(fr::heartbeat_links(0, live), ftcc::InvalidArgument);
  EXPECT_THROW(fr::heartbeat_links(0, grid(2, 2), 0), ftcc::InvalidArgument);
}

}  // namespace
