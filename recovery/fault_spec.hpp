// recovery/fault_spec.hpp: the fault-injection grammar, shared by the API, the CLI and tests.
//
//   SPEC   := KIND ':' FIELD (':' FIELD)*
//   KIND   := kill | hang | delay | exit | segv | stall | throw | invariant | bitflip | slow | wireflip
//   FIELD  := rank=R        rank (in the job's original numbering) that misbehaves   (required)
//           | step=S        training step / loop iteration at which it happens       (required)
//           | phase=P       where in the step: step (default: at its start), allreduce,
//                           broadcast, allgather (inside the named collective after part of
//                           its messages); recovery (top of a recovery attempt), shrink, agree
//                           (just before this rank's MPIX_Comm_shrink / MPIX_Comm_agree of the
//                           recovery protocol, under their deadline), hooks (before the
//                           recovery hooks); these fire in the first recovery at step S or later
//                           (a hot spare counts the step from the recovery's agreed table);
//                           spare (a hot spare, as it begins its S-th wait: 0 at start-up, and
//                           one more after each recovery or end of loop it waits through)
//           | send=N        phase allreduce/broadcast/allgather: fire just before the rank's N-th
//                           send of that phase from step S on (default 2: one message went out);
//                           a late N leaves a collective complete on some ranks and not others
//           | ms=M          delay length in milliseconds                              (delay only, required)
//           | target=T      bitflip: param (default) | grad | optim                   (bitflip only)
//           | bit=B         bitflip: which bit of the float32 element, 0-31; default 20;
//                           wireflip: which bit of the message's middle 64-bit word, 0-63;
//                           default 62 (a float32's top exponent bit, an int64's 2^62)
//           | times=N       bitflip: how many times it fires, each time the rank applies step S
//                           (a rollback redoes it); wireflip: how many collective calls of the
//                           gradient sum (its buckets, their repeat, the link probe) it changes,
//                           from step S on; default 1                  (bitflip and wireflip only)
//           | factor=F      slow: its steps take F times as long (F > 1, decimal)    (slow only, required)
//           | steps=N       slow: for N steps from step S; default 0: to the end      (slow only)
//
//   kill   SIGKILL itself            hang   SIGSTOP itself (alive but silent: a hang to fence)
//   delay  sleep M ms, then go on    exit   std::exit(3) without MPI_Finalize
//   segv   a real SIGSEGV            stall  sleeps forever with its threads alive (heartbeat on):
//                                           a rank stuck in a call, for the deadlines to catch
//   throw  throws ftcc::Error on this rank alone (an error only one rank sees)
//   invariant  throws ftcc::InternalError on this rank alone (a bug in ftcc: exit status 1)
//   bitflip  silent data corruption, done by the training driver (train/replica_verifier.hpp),
//            not by FaultInjector: one bit of the largest element (train/bit_flip.hpp) of this rank's first parameter
//            (param, after the optimizer step of step S), of its summed gradient (grad, before
//            the optimizer applies it) or of its optimizer state (optim, after the step)
//   slow     a straggler, also done by the training driver: from step S (for N steps) the rank
//            sleeps before computing so that its own time per step is F times its peers' median
//            at the last straggler check (before the first check: F times its own previous step)
//   wireflip corruption in transit, done by the training driver through the receive hook
//            (comm/communicator.hpp): from step S, the first message of 256 bytes or more this rank
//            receives in a collective call of the replicas' gradient sum arrives with bit B of
//            its middle 64-bit word flipped, for N calls (a bad link into this rank)
//
// Examples: kill:rank=2:step=40   kill:rank=1:step=10:phase=allreduce   hang:rank=3:step=5
//           kill:rank=2:step=5:phase=allreduce:send=6
//           delay:rank=0:step=7:ms=500   exit:rank=2:step=3   bitflip:rank=1:step=5:target=optim
//           wireflip:rank=2:step=12:times=4
// parse_fault_spec() throws ftcc::InvalidArgument quoting the bad spec and this grammar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftcc::recovery {

enum class FaultKind { kill, hang, delay, exit, segv, stall, throw_error, invariant, bitflip, slow, wireflip };
enum class FlipTarget { param, grad, optim };
enum class FaultPhase { step, allreduce, broadcast, allgather, recovery, shrink, agree, hooks, spare };

struct FaultSpec {
  FaultKind kind = FaultKind::kill;
  int rank = -1;
  std::int64_t step = -1;
  FaultPhase phase = FaultPhase::step;
  int delay_ms = 0;
  int send = 2;  // collective phases: fire before this send of the phase
  FlipTarget target = FlipTarget::param;  // bitflip only
  int bit = 20;
  int times = 1;
  double factor = 0;            // slow only
  std::int64_t slow_steps = 0;  // slow only; 0: to the end
  std::string text;  // the spec as written, for messages
};

FaultSpec parse_fault_spec(const std::string& spec);
std::vector<FaultSpec> parse_fault_specs(const std::vector<std::string>& specs);

const char* to_string(FaultKind k);
const char* to_string(FaultPhase p);
const char* to_string(FlipTarget t);
// The grammar above, one line per rule, for error messages and --help.
const char* fault_spec_grammar();

}  // namespace ftcc::recovery
