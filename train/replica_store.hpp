// train/replica_store.hpp: the in-memory copies of training state a model-parallel rank holds,
// and the plan that rebuilds the model from the survivors' copies after a failure.
//
// A unit is one piece of the model's state as the strategy cuts it (train/parallel_strategy.hpp): unit
// `index` of a model cut into `of` units (pp: layer i of the L layers; tp: shard k of a split over
// `of` ranks). A rank stores, per committed step, the packed bytes of its own units and of the units
// its ring predecessors sent it (buddy replicas). Every entry is a genuine state of that unit after
// that many committed steps.
//
// plan_restore (pure, unit-tested in tests/train/replica_store_test.cpp): holdings[r] lists what
// survivor r holds. The plan is the newest (step, of) at which every unit 0..of-1 has a holder
// (at one step, the larger `of` first), each unit taken from the lowest rank holding it. When no
// such pair exists, `lost` names the units missing at the pair that covers the most units (the
// newest among equals), or all `units_if_none` units when nobody holds anything.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/train/pinned_buffers.hpp"

namespace ftcc::train {

struct UnitKey {
  int index = 0;
  int of = 0;
  auto operator<=>(const UnitKey&) const = default;
};

class ReplicaStore {
 public:
  void put(std::int64_t step, UnitKey key, Bytes bytes);
  // The same, sharing bytes the caller may still read (a send from them in flight).
  void put(std::int64_t step, UnitKey key, std::shared_ptr<Bytes> bytes);
  // An entry whose bytes are made by `make` when first read (get): a rank's live state, packed
  // only if a restore picks it. The caller drops the entries not made yet (drop_unmade) before
  // that state changes.
  void put_lazy(std::int64_t step, UnitKey key, std::function<Bytes()> make);
  void drop_unmade();
  // The bytes of (step, key); throws ftcc::Error when absent (a planner bug).
  const std::shared_ptr<Bytes>& get(std::int64_t step, UnitKey key) const;
  bool has(std::int64_t step, UnitKey key) const;
  // Whether (step, key) is held as bytes already (false for an entry of put_lazy not read yet).
  bool made(std::int64_t step, UnitKey key) const;
  // Keeps the entries of the `steps` newest steps.
  void keep_newest(int steps);
  void drop_after(std::int64_t step);
  void clear() { m_.clear(); }
  // The oldest step held, -1 when none.
  std::int64_t oldest() const { return m_.empty() ? -1 : m_.begin()->first; }
  std::size_t bytes() const;  // of the entries made
  // Every entry as (step, index, of), newest step first.
  std::vector<std::int64_t> encode() const;

 private:
  struct Entry {
    mutable std::shared_ptr<Bytes> bytes;  // null until a lazy entry is read
    std::function<Bytes()> make;           // lazy entries only
  };
  std::map<std::int64_t, std::map<UnitKey, Entry>> m_;
};

struct Holding {
  std::int64_t step = 0;
  UnitKey key;
};

// Every member's holdings (index = rank in c). Collective: two allgathers.
std::vector<std::vector<Holding>> gather_holdings(comm::Communicator& c, const ReplicaStore& mine);

struct RestorePlan {
  std::int64_t step = -1;   // the step every unit is restored to; -1 when state was lost
  int of = 0;               // the units 0..of-1 of that step
  std::vector<int> holder;  // per unit: the rank that sends it (size `of` when step >= 0)
  std::vector<int> lost;    // units with no holder (when step == -1)
};

RestorePlan plan_restore(const std::vector<std::vector<Holding>>& holdings, int units_if_none);

}  // namespace ftcc::train
