#include "ftcc/recovery/fault_spec.hpp"

#include <charconv>
#include <cstdlib>
#include <limits>
#include <set>

#include "ftcc/base/error.hpp"

namespace ftcc::recovery {
namespace {

[[noreturn]] void reject(const std::string& spec, const std::string& why) {
  throw ftcc::InvalidArgument("bad fault spec '" + spec + "': " + why + "\n" + fault_spec_grammar());
}

// A non-negative integer no larger than `max` (rank and ms are ints: a larger value would wrap).
std::int64_t parse_int(const std::string& spec, const std::string& key, const std::string& v,
                       std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
  std::int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec == std::errc::result_out_of_range) reject(spec, key + "='" + v + "' is too large");
  if (ec != std::errc() || p != v.data() + v.size() || v.empty())
    reject(spec, key + "='" + v + "' is not an integer");
  if (out < 0) reject(spec, key + " must be >= 0, got " + v);
  if (out > max) reject(spec, key + " must be <= " + std::to_string(max) + ", got " + v);
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

}  // namespace

const char* fault_spec_grammar() {
  return "fault spec grammar: KIND:rank=R:step=S[:phase=P][:send=N][:ms=M][:target=T][:bit=B][:times=N][:factor=F][:steps=N]\n"
         "  KIND  kill (SIGKILL) | hang (SIGSTOP) | delay (sleep ms=M) | exit (exit(3) without MPI_Finalize)\n"
         "        | segv (a real segmentation fault) | stall (stop making progress, threads alive)\n"
         "        | throw (an exception on this rank alone) | invariant (an internal invariant fails on this rank)\n"
         "        | bitflip (flip bit B, default 20, of one float of T: param (default) | grad | optim; N times, default 1)\n"
         "        | slow (steps take factor=F times as long as its peers', for steps=N steps, default to the end)\n"
         "        | wireflip (flip bit B, default 62, of the middle 64-bit word of a message this rank receives in the gradient sum; N sums, default 1)\n"
         "  P     step (default) | allreduce | broadcast | allgather | recovery | shrink | agree | hooks | spare\n"
         "  N     allreduce/broadcast/allgather: fire before the rank's N-th send of the phase (default 2)\n"
         "  e.g.  kill:rank=2:step=40  kill:rank=1:step=10:phase=allreduce  delay:rank=0:step=7:ms=500";
}

const char* to_string(FaultKind k) {
  switch (k) {
    case FaultKind::kill: return "kill";
    case FaultKind::hang: return "hang";
    case FaultKind::delay: return "delay";
    case FaultKind::exit: return "exit";
    case FaultKind::segv: return "segv";
    case FaultKind::stall: return "stall";
    case FaultKind::throw_error: return "throw";
    case FaultKind::invariant: return "invariant";
    case FaultKind::bitflip: return "bitflip";
    case FaultKind::slow: return "slow";
    case FaultKind::wireflip: return "wireflip";
  }
  return "?";
}

const char* to_string(FaultPhase p) {
  switch (p) {
    case FaultPhase::step: return "step";
    case FaultPhase::allreduce: return "allreduce";
    case FaultPhase::broadcast: return "broadcast";
    case FaultPhase::allgather: return "allgather";
    case FaultPhase::recovery: return "recovery";
    case FaultPhase::shrink: return "shrink";
    case FaultPhase::agree: return "agree";
    case FaultPhase::hooks: return "hooks";
    case FaultPhase::spare: return "spare";
  }
  return "?";
}

const char* to_string(FlipTarget t) {
  switch (t) {
    case FlipTarget::param: return "param";
    case FlipTarget::grad: return "grad";
    case FlipTarget::optim: return "optim";
  }
  return "?";
}

namespace {

FaultKind kind_of(const std::string& spec, const std::string& kind) {
  if (kind == "kill") return FaultKind::kill;
  if (kind == "hang") return FaultKind::hang;
  if (kind == "delay") return FaultKind::delay;
  if (kind == "exit") return FaultKind::exit;
  if (kind == "segv") return FaultKind::segv;
  if (kind == "stall") return FaultKind::stall;
  if (kind == "throw") return FaultKind::throw_error;
  if (kind == "invariant") return FaultKind::invariant;
  if (kind == "bitflip") return FaultKind::bitflip;
  if (kind == "slow") return FaultKind::slow;
  if (kind == "wireflip") return FaultKind::wireflip;
  reject(spec, "unknown kind '" + kind + "'");
}

FaultPhase phase_of(const std::string& spec, const std::string& val) {
  for (FaultPhase p : {FaultPhase::step, FaultPhase::allreduce, FaultPhase::broadcast, FaultPhase::allgather,
                       FaultPhase::recovery, FaultPhase::shrink, FaultPhase::agree, FaultPhase::hooks, FaultPhase::spare})
    if (val == to_string(p)) return p;
  reject(spec, "unknown phase '" + val + "'");
}

FlipTarget target_of(const std::string& spec, const std::string& val) {
  for (FlipTarget t : {FlipTarget::param, FlipTarget::grad, FlipTarget::optim})
    if (val == to_string(t)) return t;
  reject(spec, "unknown target '" + val + "' (param, grad or optim)");
}

// One key=value field into f.
void set_field(const std::string& spec, FaultSpec& f, const std::string& key, const std::string& val) {
  if (key == "rank") f.rank = static_cast<int>(parse_int(spec, key, val, std::numeric_limits<int>::max()));
  else if (key == "step") f.step = parse_int(spec, key, val);
  else if (key == "send") f.send = static_cast<int>(parse_int(spec, key, val, 1000000));
  else if (key == "ms") f.delay_ms = static_cast<int>(parse_int(spec, key, val, std::numeric_limits<int>::max()));
  else if (key == "bit") f.bit = static_cast<int>(parse_int(spec, key, val, f.kind == FaultKind::wireflip ? 63 : 31));
  else if (key == "steps") f.slow_steps = parse_int(spec, key, val);
  else if (key == "times") f.times = static_cast<int>(parse_int(spec, key, val, 1000000));
  else if (key == "target") f.target = target_of(spec, val);
  else if (key == "phase") f.phase = phase_of(spec, val);
  else if (key == "factor") {
    char* end = nullptr;
    f.factor = std::strtod(val.c_str(), &end);
    if (val.empty() || end != val.c_str() + val.size() || !(f.factor > 1) || !(f.factor <= 1000))
      reject(spec, "factor='" + val + "' must be a number above 1 and at most 1000");
  } else {
    reject(spec, "unknown field '" + key + "'");
  }
}

// The fields each kind needs, takes and refuses, and the phases it fires in.
void check_combination(const std::string& spec, const FaultSpec& f, const std::set<std::string>& seen) {
  if (!seen.count("rank")) reject(spec, "rank=R is required");
  if (!seen.count("step")) reject(spec, "step=S is required");
  if (f.kind == FaultKind::delay && !seen.count("ms")) reject(spec, "delay needs ms=M");
  if ((f.kind == FaultKind::throw_error || f.kind == FaultKind::invariant) && f.phase != FaultPhase::step && f.phase != FaultPhase::hooks &&
      f.phase != FaultPhase::allreduce && f.phase != FaultPhase::broadcast && f.phase != FaultPhase::allgather &&
      f.phase != FaultPhase::spare)
    reject(spec, std::string(to_string(f.kind)) + " fires at phase step, allreduce, broadcast, allgather, hooks or spare (the protocol's own calls never throw)");
  if (f.kind != FaultKind::delay && seen.count("ms")) reject(spec, "ms=M only applies to delay");
  if (seen.count("send") && f.phase != FaultPhase::allreduce && f.phase != FaultPhase::broadcast &&
      f.phase != FaultPhase::allgather)
    reject(spec, "send=N only applies to phase allreduce, broadcast or allgather");
  if (seen.count("send") && f.send < 1) reject(spec, "send must be >= 1");
  if (f.kind != FaultKind::bitflip && seen.count("target")) reject(spec, "target= only applies to bitflip");
  for (const char* k : {"bit", "times"})
    if (f.kind != FaultKind::bitflip && f.kind != FaultKind::wireflip && seen.count(k))
      reject(spec, std::string(k) + "= only applies to bitflip and wireflip");
  if (f.kind == FaultKind::wireflip && f.phase != FaultPhase::step)
    reject(spec, "wireflip happens in the training step's gradient sum (phase=step)");
  if (f.kind == FaultKind::wireflip && f.times < 1) reject(spec, "times must be >= 1");
  for (const char* k : {"factor", "steps"})
    if (f.kind != FaultKind::slow && seen.count(k)) reject(spec, std::string(k) + "= only applies to slow");
  if (f.kind == FaultKind::slow && !seen.count("factor")) reject(spec, "slow needs factor=F");
  if (f.kind == FaultKind::slow && f.phase != FaultPhase::step) reject(spec, "slow happens in the training step (phase=step)");
  if (f.kind == FaultKind::bitflip && f.phase != FaultPhase::step)
    reject(spec, "bitflip happens in the training step (phase=step), not in phase " + std::string(to_string(f.phase)));
  if (f.kind == FaultKind::bitflip && f.times < 1) reject(spec, "times must be >= 1");
}

}  // namespace

FaultSpec parse_fault_spec(const std::string& spec) {
  const auto parts = split(spec, ':');
  FaultSpec f;
  f.text = spec;
  f.kind = kind_of(spec, parts[0]);
  if (f.kind == FaultKind::wireflip) f.bit = 62;  // in a float32 pair the second's top exponent bit; in an int64, 2^62
  std::set<std::string> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    if (eq == std::string::npos) reject(spec, "field '" + parts[i] + "' is not key=value");
    const std::string key = parts[i].substr(0, eq), val = parts[i].substr(eq + 1);
    if (!seen.insert(key).second) reject(spec, "field '" + key + "' given twice");
    set_field(spec, f, key, val);
  }
  check_combination(spec, f, seen);
  return f;
}

std::vector<FaultSpec> parse_fault_specs(const std::vector<std::string>& specs) {
  std::vector<FaultSpec> out;
  out.reserve(specs.size());
  for (const auto& s : specs) out.push_back(parse_fault_spec(s));
  return out;
}

}  // namespace ftcc::recovery
