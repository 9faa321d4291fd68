// recovery/inflight_reconcile.hpp: one result per collective after a group lost members.
//
// A collective in flight when a member dies can complete on some survivors and not on others (a
// ring completes on the ranks whose last block arrived before the death). Once the survivors hold
// a new communicator, reconcile_inflight() brings them to one outcome per sequence number, so no
// two survivors ever hand their caller different results for the same call:
//   1. every survivor reports `done`, the highest sequence number of the old group it completed
//      (every lower one completed too: a rank runs its collectives in order), and whether it can
//      take part at all (`exact`: false for a rank with point-to-point in flight, or one told to
//      report failures instead). lo = min done, hi = max done.
//   2. Sequence numbers in (lo, hi] completed somewhere. The lowest survivor with done == hi (the
//      source) holds the result of each of them (see Retention) and sends it to every survivor;
//      one with done < s takes it (adopt). Only a result that is the same on every rank can be
//      taken (allreduce, allgather, broadcast, barrier): if one in (lo, hi] is not (reduce_scatter,
//      gather, all_to_all, ...), or sizes differ, no rank adopts anything and the outcome is not
//      exact.
//   3. Sequence numbers > hi completed nowhere: the caller runs them again on the new group,
//      unless one of them cannot run on fewer ranks (cannot_redo): then the outcome is not exact.
// Every decision is the same on every survivor (it is computed from the same exchanged values).
//
// Retention (the caller's duty, which makes step 2 sound): keep the result of every operation
// from the last completed "every rank's output depends on every rank's input" operation (an
// allreduce, an allgather, a barrier, ...) on. Completing such an operation f here means every
// rank started f, so every rank completed everything before f: lo >= f - 1, and the source holds
// every s in (lo, hi].
//
// Failure behaviour: a failure during the exchange throws comm::FaultDetected out of the call
// (recover again, then call it again: a rank that adopted a result reports a higher `done`, so a
// second call is safe). The exchange uses the communicator's collectives; all survivors must call
// it at the same point of their collective sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ftcc/comm/communicator.hpp"

namespace ftcc::recovery {

// The result a rank holds for one sequence number.
struct HeldResult {
  bool held = false;       // false: the rank no longer holds it (a bug in the caller's retention)
  bool shareable = false;  // the same bytes on every rank (allreduce, allgather, broadcast, barrier)
  const void* data = nullptr;
  std::size_t bytes = 0;
};

struct InflightView {
  std::int64_t done = -1;  // highest completed sequence number of the old group (-1: none)
  bool exact = true;       // false: this rank cannot reconcile (point-to-point in flight, opted out)
  int why_not_code = 1;    // when not exact: why, a positive code the caller defines
  // The line for the outcome when the lowest survivor that cannot reconcile is `rank` with `code`
  // (the same on every survivor); unset: "rank R of the survivors cannot reconcile its operations".
  std::function<std::string(int rank, int code)> why_not_text;
  // The result held for seq (asked on the source only, for seq in (lo, done]).
  std::function<HeldResult(std::int64_t seq)> held;
  // The bytes this rank's own call with that sequence number expects as its result (asked for seq
  // in (done, hi]); -1 when this rank has not made that call yet (it takes the result when it does).
  std::function<std::int64_t(std::int64_t seq)> expects;
  // The first call made here with a sequence number > hi that cannot run again on the survivors
  // (an allgather made for the old group's size, a reduce whose root died), or -1.
  std::function<std::int64_t(std::int64_t hi)> cannot_redo;
  // Takes the result of seq (called in increasing seq, for seq in (done, hi], once exact).
  std::function<void(std::int64_t seq, const void* data, std::size_t bytes)> adopt;
};

struct ReconcileOutcome {
  bool exact = true;
  std::int64_t lo = -1, hi = -1;  // min and max done over the survivors
  int source = -1;                // the rank that sent the results of (lo, hi] (-1: none needed)
  int adopted = 0;                // results this rank took
  std::string why_not;            // one line when not exact (the same on every survivor)
};

ReconcileOutcome reconcile_inflight(comm::Communicator& c, const InflightView& mine);

}  // namespace ftcc::recovery
