// recovery/heartbeat_topology.hpp: who sends heartbeats to whom, and who watches whom (pure).
//
// Why not all-to-all: with R ranks on each of H hosts, all-to-all costs every host R x (R x H - 1)
// datagrams a period. Here each host's traffic off the host does not grow with H:
//  - On a host, its two lowest live ranks are its *speakers*. Every other rank of the host beats
//    to and watches both speakers; the speakers beat to and watch every rank of the host.
//  - Hosts form a ring ordered by their lowest live rank. Each speaker beats to the speakers of
//    the `fanout` hosts on either side and watches those hosts *as a whole*: a datagram from any
//    rank of the host counts, so one stopped speaker never makes its host look dead (the other
//    speaker still beats, and the host's own ranks fence the stopped one).
//  - News (a suspicion) goes at once from a speaker to every rank of its host and to the speakers
//    of every other host, and from any other rank to its speakers: news a speaker finds (a lost
//    host) reaches every rank in two hops, news from any rank in three.
// Contract: pure function of (me, live members, fanout); every rank computing it over the same
// live set gets links that are symmetric (a sends to b iff b watches a, directly or as a host).
#pragma once

#include <string>
#include <vector>

namespace ftcc::recovery {

struct HeartbeatMember {
  int rank = -1;
  std::string host_id;  // Heartbeat::host_identity() of the rank's host
};

struct HeartbeatLinks {
  std::vector<int> send_to;                    // ranks this rank beats to every period
  std::vector<int> watch_ranks;                // ranks of this host watched one by one
  std::vector<std::vector<int>> watch_hosts;   // other hosts watched as a whole (all their live ranks)
  std::vector<int> news_to;                    // ranks told at once when this rank learns of a suspicion
  bool speaker = false;
};

// Pre: `me` is in `live`, ranks distinct (else ftcc::InvalidArgument); fanout >= 1.
HeartbeatLinks heartbeat_links(int me, const std::vector<HeartbeatMember>& live, int fanout = 2);

// Datagrams a host sends off itself per period, summed over its speakers (for the traffic figure).
int remote_datagrams_per_period(const std::vector<HeartbeatMember>& live, const std::string& host_id, int fanout = 2);

}  // namespace ftcc::recovery
