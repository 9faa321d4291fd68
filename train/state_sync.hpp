// train/state_sync.hpp: bringing every rank of a group to one training state: what a
// data-parallel recovery hook does (every survivor takes the state of the most advanced one, and a
// hot spare or respawned process that joined gets it too), and what a start from a file read on one
// rank does, for a training loop of one's own (docs/training.md has one). ftcc-train's driver moves
// state with its restore plan instead (train/training_driver.hpp), one path for every mode.
//
//   newest_holder(ev)   in a recovery hook: the rank (of the new group) to copy from, the lowest
//                       one whose last committed step is the newest (ev.committed_max) and that did
//                       not just join (a joiner holds no state yet). Throws ftcc::Error when no
//                       rank holds that step (a recovery that lost every holder).
//   sync_state(comm, root, tensors, position)
//                       collective over comm: root's `tensors` (parameters, optimizer state: any
//                       named tensors with the same names, shapes and dtypes on every rank; the
//                       optimizer's lists are opt.state_dict()) and `position` words (step, data
//                       cursor, ...) are broadcast in place, then a SHA-256 of the tensors and the
//                       words is compared across the ranks. CPU tensors are received straight into
//                       their memory; device tensors go through one packed host buffer.
// Failure: a peer that dies meanwhile makes the broadcast throw comm::FaultDetected on the
// survivors (inside a recovery hook the protocol then starts a new attempt and the hook runs again,
// so the state is synced from scratch); the tensors of non-root ranks are then undefined. Buffers an
// interrupted broadcast may still write are kept alive (comm::KeptBuffer). Ranks that still differ
// after the transfer throw ftcc::Error on every rank alike, naming the lowest differing rank.
#pragma once

#include <cstdint>
#include <span>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/nn/named_tensors.hpp"
#include "ftcc/recovery/recovery_event.hpp"

namespace ftcc::train {

int newest_holder(const recovery::RecoveryEvent& ev);

// Returns the bytes root sent (tensors and words).
std::int64_t sync_state(comm::Communicator& comm, int root, const nn::NamedTensors& tensors,
                        std::span<std::int64_t> position);

}  // namespace ftcc::train
