// train/wire_flip.hpp: the wireflip fault (recovery/fault_spec.hpp): messages that arrive changed
// on one rank, as through a bad link, NIC or memory on the way. Installed as the process's receive
// hook (comm/communicator.hpp); the training driver arms it around the replicas' gradient sum, so
// only that sum's messages (its buckets, their repeat and the link probe of --verify-reductions)
// are touched, never the job's control messages.
//
// While armed at a step >= the spec's step, the first receive of 256 bytes or more in a collective
// call whose name ends in "allreduce" (or is "link_probe") gets bit B of its middle 64-bit word
// flipped, for at most `times` calls over the run. Thread-safe: the hook runs on whatever thread
// runs the collective (the progress thread for overlapped buckets).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ftcc/recovery/fault_spec.hpp"

namespace ftcc::train {

class WireFlip {
 public:
  // specs: this rank's faults (the wireflip ones are used); rank: for the notice on stderr.
  WireFlip(const std::vector<recovery::FaultSpec>& specs, int rank);
  ~WireFlip();  // removes the hook
  WireFlip(const WireFlip&) = delete;
  WireFlip& operator=(const WireFlip&) = delete;

  bool any() const { return !specs_.empty(); }
  // Arm for the gradient sum of `step` (disarm: -1).
  void arm(std::int64_t step) { step_.store(step, std::memory_order_release); }
  // Flips done so far (all specs).
  int fired() const;
  // Armed for a scope: arms at `step`, disarms when the scope ends (an exception included).
  struct Armed {
    Armed(WireFlip& w, std::int64_t step) : w_(w) { w_.arm(step); }
    ~Armed() { w_.arm(-1); }
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;

   private:
    WireFlip& w_;
  };

 private:
  void on_receive(const char* op, int tag, void* buf, std::size_t bytes);

  struct Spec {
    recovery::FaultSpec f;
    int fired = 0;
    int last_tag = -1;
  };
  std::vector<Spec> specs_;
  int rank_;
  std::atomic<std::int64_t> step_{-1};
  mutable std::mutex mu_;  // guards specs_' counters
};

}  // namespace ftcc::train
