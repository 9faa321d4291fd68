// train/parallel_strategy.hpp: what a parallel scheme tells the training driver
// (train/training_driver.hpp): dp (train/dp_strategy.hpp), pp (train/pp_strategy.hpp), tp
// (train/tp_strategy.hpp), and the hybrids dp,pp and dp,tp (replicas of pp or tp).
//
// The driver owns the loop, the data, the progress, the replicas, recovery, checkpoints, the grid
// of model replicas (train/parallel_grid.hpp), the replicas' gradient sum and the summary; a
// strategy owns this rank's part of one model replica and says how it is cut, trained and moved.
// Here n and r are the ranks of one replica and this rank's position in it (1 and 0 for dp, whose
// replica is one rank; the whole job for pp and tp; --pp-size / --tp-size ranks for dp,pp and
// dp,tp). The model is cut into units (train/replica_store.hpp: UnitKey{index, of}); a split over
// n ranks gives rank r the units units_of(n, r). Parts of the contract:
//  - build(n, r): this rank's part for the split (n, r), initialised as nn::mlp(widths, seed)
//    initialises the whole model, so the parts of a fresh run together are the single-process model.
//  - pack/unpack/unit_bytes: only for units this rank owns (units_of(n, r) of its last build). The
//    live units are a copy at the rank's committed step (the driver's restore counts them).
//  - The full model (FullModel, train/run_common.hpp: what checkpoints hold) is read and written
//    unit by unit with full_unit_bytes/unit_to_full/unit_from_full, for any unit of any split.
//  - restore_units(of, n, r): which units of a split into `of` rank r of the new split (n, r) needs
//    to rebuild its part after a failure; rebuild(n, r, units) then builds it from their bytes.
//  - step(): one training step (forward and backward) of this replica, on the communicator of its
//    ranks, on its rows of a global batch (StepWork; the loss is scaled by the global batch, so the
//    replicas' gradients sum to the global batch's); point-to-point buffers go to `pins`
//    (train/pinned_buffers.hpp). The returned loss and tally are this rank's shares: summed over
//    all ranks they are the step's loss and the rows fed once. The driver then sums the gradients
//    of params() over the replicas (--deterministic with several micro-batches: the exact sum of
//    StepShare::parts), and apply() takes the optimizer step (after the driver's commit checks).
// Errors: validate() throws ftcc::InvalidArgument naming the flag; anything else ftcc::Error.
// Communication errors (comm::FaultDetected) pass through to the driver, which recovers.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/data/sampler.hpp"
#include "ftcc/nn/named_tensors.hpp"
#include "ftcc/train/pinned_buffers.hpp"
#include "ftcc/train/replica_store.hpp"
#include "ftcc/train/run_common.hpp"
#include "ftcc/train/training_data.hpp"

namespace ftcc::train {

class GradientReducer;
class StepBreakdown;

// One step's work for one replica (train/parallel_grid.hpp: ParallelGrid::micro_batches_of).
struct StepWork {
  std::vector<std::int64_t> ids;   // this replica's rows of the global batch (maybe none)
  std::vector<std::int64_t> cuts;  // a pipeline's micro-batches: rows [cuts[j], cuts[j+1]) of ids
  std::int64_t global_rows = 0;    // the global batch's rows: the loss's denominator
  std::int64_t epoch = 0;
  // The exact sum over replicas (dp, dp,pp and dp,tp under --deterministic): after each
  // micro-batch's backward on this rank, the strategy appends parts_of->snapshot() (the gradients
  // in the reducer's arena: that micro-batch's alone) to StepShare::parts and zeroes the
  // gradients. Null otherwise.
  GradientReducer* parts_of = nullptr;
  // The step's phases (data, forward, backward), for a strategy that tells them apart (dp); the
  // driver counts a step without them as compute.
  StepBreakdown* timer = nullptr;
};

// One step's result on this rank (its shares, see above).
struct StepShare {
  double loss = 0;
  bool gradients_finite = true;
  data::SampleTally fed;
  std::vector<std::vector<float>> parts;  // per micro-batch gradients (StepWork::parts_of)
  bool timed = false;                     // the strategy marked its phases on StepWork::timer
};

// The bytes of units by index, for rebuild(): views of the driver's copies (valid during the call).
using UnitBytes = std::map<int, std::span<const std::byte>>;

// The memory of each tensor of `state`, in order (ParallelStrategy::unit_views); empty when one
// of them is not in host memory.
inline std::vector<std::span<const std::byte>> host_views(const nn::NamedTensors& state) {
  std::vector<std::span<const std::byte>> out;
  for (const auto& [name, t] : state) {
    if (t.device() != tensor::Device::CPU) return {};
    out.emplace_back(static_cast<const std::byte*>(t.raw_data()), t.nbytes());
  }
  return out;
}

class ParallelStrategy {
 public:
  virtual ~ParallelStrategy() = default;

  // "dp", "pp", "tp": the log's prefix and the flags' --parallel value.
  virtual const char* name() const = 0;
  // How the log names a list of units ("layers", "shard(s)") and what a re-split does to them
  // ("layers re-partitioned", "shards re-split").
  virtual const char* units_name() const = 0;
  virtual const char* regroup_name() const = 0;
  // Throws ftcc::InvalidArgument when the model cannot be cut over n ranks (naming the flags): at
  // the start (at_start) by the rule the user is told, after a failure by what the strategy can
  // still run on (tp re-splits unevenly over survivors; it starts only on even splits).
  virtual void validate(int n, bool at_start) const = 0;
  // The most ranks one replica can be cut over (pp: the layers; tp: the narrowest hidden width).
  virtual int max_split() const = 0;
  // The units of a model that a split over n ranks gives rank r.
  virtual std::vector<UnitKey> units_of(int n, int r) const = 0;

  virtual void build(int n, int r) = 0;
  virtual Bytes pack(UnitKey u) const = 0;
  virtual void unpack(UnitKey u, std::span<const std::byte> bytes) = 0;
  virtual std::size_t unit_bytes(UnitKey u) const = 0;
  // The live memory of unit u (one this rank owns) in the order pack() writes it, so that a
  // restore sends straight from the tensors without a packed copy: views that stay valid, and
  // read only, until the next build or rebuild (dp's tensors are never reallocated). Empty where a
  // scheme does not offer it or the state is not in host memory (a GPU): pack() is used then.
  virtual std::vector<std::span<const std::byte>> unit_views(UnitKey /*u*/) const { return {}; }
  // Parameter and optimizer bytes this rank holds.
  virtual std::size_t state_bytes() const = 0;

  virtual std::size_t full_unit_bytes(const FullModel& full, UnitKey u) const = 0;
  virtual void unit_to_full(FullModel& full, UnitKey u, std::span<const std::byte> bytes) const = 0;
  virtual Bytes unit_from_full(const FullModel& full, UnitKey u) const = 0;

  virtual std::vector<int> restore_units(int of, int n, int r) const = 0;
  virtual void rebuild(int n, int r, int of, const UnitBytes& units) = 0;

  virtual StepShare step(comm::Communicator& c, const StepWork& work, Pins& pins) = 0;
  // This rank's parameters (their gradients are valid after step()).
  virtual const nn::NamedTensors& params() const = 0;
  // Its optimizer's state (live handles, "step" first: optim/optimizer.hpp), for the bitflip fault.
  virtual nn::NamedTensors optimizer_state() const = 0;
  virtual void apply() = 0;
  // The whole model, when this rank holds it (dp): every rank then evaluates its share of the data
  // at the end. Null otherwise (the driver gathers the units on rank 0).
  virtual nn::Module* whole_model() { return nullptr; }
  // Whether step() runs one backward over its rows whenever the replicas' sum is not exact (dp;
  // under --deterministic each micro-batch has its own): the driver then overlaps the sum with it
  // (GradientReducer::begin_overlap).
  virtual bool one_backward() const { return false; }
};

}  // namespace ftcc::train
