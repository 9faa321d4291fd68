// recovery/ft_comm.hpp: the fault-tolerant communicator the recovery protocol runs on, as an
// interface: ULFM's operations and the few ordinary ones the protocol makes itself.
//
// Two implementations: MpiFtComm (recovery/mpi_ft_comm.hpp: ULFM on an MPI communicator, what
// every real job uses) and SimFtComm (recovery/simulation/: ranks as threads of one process
// under a seeded scheduler, for the deterministic simulation of the protocol). ResilientGroup
// makes every protocol call through this interface, so both run the same protocol code.
//
// Semantics (ULFM, MPI 5 FT proposal), which both implementations keep:
//  - revoke(): every pending and later operation on this communicator, on every member, fails
//    with comm::Revoked, except agree() and shrink(), which work on a revoked communicator.
//    Revoking twice, or one a peer revoked, is harmless (never throws).
//  - shrink(): uniform: every survivor gets a communicator of the same survivors, renumbered in
//    order, and the same kept/lost lists. Throws comm::FaultDetected when a failure interrupts it
//    (every caller then retries); nothing is leaked then.
//  - agree(flag): uniform: the bitwise AND over the contributions, and failure_noticed, are the
//    same on every survivor. A failure noticed is acknowledged, so the next agreement reports only
//    newer ones.
//  - allgather(), broadcast(), split() and spawn_merged() are ordinary collectives: a failure or a
//    revoke may reach some members and not others (a member can complete while another throws
//    comm::FaultDetected).
// All members must call the collectives of one communicator in the same order (as MPI requires).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ftcc/comm/ulfm.hpp"

namespace ftcc::comm {
class Communicator;
}

namespace ftcc::recovery {

class FtComm;

struct FtShrunk {
  std::unique_ptr<FtComm> comm;  // the survivors, renumbered in order
  std::vector<int> kept;         // kept[i]: the rank in the old communicator of new rank i (ascending)
  std::vector<int> lost;         // ranks of the old communicator missing from the new one (ascending)
};

class FtComm {
 public:
  virtual ~FtComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void revoke() = 0;
  virtual FtShrunk shrink() = 0;
  virtual comm::Agreement agree(unsigned flag) = 0;
  // The same agreement, for a process that may wait in it for a whole run (a hot spare): idle()
  // is called about every millisecond while it waits.
  virtual comm::Agreement agree_polled(unsigned flag, const std::function<void()>& idle) = 0;

  // Every member's `words` int64 in rank order into all[size() * words]. Throws FaultDetected.
  virtual void allgather(const std::int64_t* mine, std::int64_t* all, std::size_t words) = 0;
  // MPI_Comm_split: the members with color >= 0 form a new communicator ordered by key; a member
  // with color < 0 gets nullptr. Throws FaultDetected.
  virtual std::unique_ptr<FtComm> split(int color, int key) = 0;
  // Root's `words` int64 to every member (MPI_Bcast). Throws FaultDetected.
  virtual void broadcast(std::int64_t* words, std::size_t n, int root) = 0;
  // MPI_Comm_spawn of k new processes of this program, merged with this communicator: its members
  // keep their ranks, the new processes follow (MPI_Intercomm_merge). The new processes get the
  // same merged communicator from their start (ResilientGroup's constructor, recovery/respawn.cpp).
  // Throws FaultDetected on a failure, ftcc::Error when the processes cannot be started.
  virtual std::unique_ptr<FtComm> spawn_merged(int k) = 0;

  // The communicator the program's own collectives run on (comm/); nullptr where there is none
  // (a simulated rank, whose program talks through allgather() only).
  virtual comm::Communicator* communicator() = 0;
};

}  // namespace ftcc::recovery
