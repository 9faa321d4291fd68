// The fault-injection grammar: every accepted form, and every rejection quoting the grammar.
#include <gtest/gtest.h>

#include "ftcc/base/error.hpp"
#include "ftcc/recovery/fault_injector.hpp"
#include "ftcc/recovery/fault_spec.hpp"

namespace fr = ftcc::recovery;

namespace {

TEST(FaultSpec, ParsesEveryKindAndPhase) {
  auto k = fr::parse_fault_spec("kill:rank=2:step=40");
  EXPECT_EQ(k.kind, fr::FaultKind::kill);
  EXPECT_EQ(k.rank, 2);
  EXPECT_EQ(k.step, 40);
  EXPECT_EQ(k.phase, fr::FaultPhase::step);

  auto a = fr::parse_fault_spec("kill:rank=1:step=10:phase=allreduce");
  EXPECT_EQ(a.phase, fr::FaultPhase::allreduce);
  EXPECT_EQ(fr::parse_fault_spec("hang:step=5:rank=3").kind, fr::FaultKind::hang);  // any field order
  auto d = fr::parse_fault_spec("delay:rank=0:step=7:ms=500");
  EXPECT_EQ(d.kind, fr::FaultKind::delay);
  EXPECT_EQ(d.delay_ms, 500);
  EXPECT_EQ(fr::parse_fault_spec("exit:rank=2:step=3").kind, fr::FaultKind::exit);
  EXPECT_EQ(fr::parse_fault_spec("kill:rank=0:step=1:phase=recovery").phase, fr::FaultPhase::recovery);
  EXPECT_EQ(fr::parse_fault_spec("kill:rank=0:step=1:phase=broadcast").phase, fr::FaultPhase::broadcast);
}

TEST(FaultSpec, ParsesSlow) {
  const auto s = fr::parse_fault_spec("slow:rank=2:step=10:factor=2.5");
  EXPECT_EQ(s.kind, fr::FaultKind::slow);
  EXPECT_DOUBLE_EQ(s.factor, 2.5);
  EXPECT_EQ(s.slow_steps, 0);
  EXPECT_EQ(fr::parse_fault_spec("slow:rank=2:step=10:factor=3:steps=20").slow_steps, 20);
}

TEST(FaultSpec, ParsesSendInsideCollectives) {
  EXPECT_EQ(fr::parse_fault_spec("kill:rank=1:step=3:phase=allreduce").send, 2);
  EXPECT_EQ(fr::parse_fault_spec("kill:rank=1:step=3:phase=allreduce:send=6").send, 6);
  EXPECT_EQ(fr::parse_fault_spec("hang:rank=0:step=0:phase=broadcast:send=1").send, 1);
  EXPECT_THROW(fr::parse_fault_spec("kill:rank=1:step=3:send=6"), ftcc::InvalidArgument);  // phase=step
  EXPECT_THROW(fr::parse_fault_spec("kill:rank=1:step=3:phase=shrink:send=2"), ftcc::InvalidArgument);
  EXPECT_THROW(fr::parse_fault_spec("kill:rank=1:step=3:phase=allreduce:send=0"), ftcc::InvalidArgument);
  EXPECT_THROW(fr::parse_fault_spec("kill:rank=1:step=3:phase=allreduce:send=x"), ftcc::InvalidArgument);
}

TEST(FaultSpec, ParsesWireflip) {
  const auto w = fr::parse_fault_spec("wireflip:rank=2:step=12");
  EXPECT_EQ(w.kind, fr::FaultKind::wireflip);
  EXPECT_EQ(w.bit, 62);  // of a 64-bit word
  EXPECT_EQ(w.times, 1);
  const auto t = fr::parse_fault_spec("wireflip:rank=0:step=3:bit=63:times=1000");
  EXPECT_EQ(t.bit, 63);
  EXPECT_EQ(t.times, 1000);
  EXPECT_THROW(fr::parse_fault_spec("wireflip:rank=0:step=3:bit=64"), ftcc::InvalidArgument);
  EXPECT_THROW(fr::parse_fault_spec("bitflip:rank=0:step=3:bit=32"), ftcc::InvalidArgument);
  EXPECT_THROW(fr::parse_fault_spec("wireflip:rank=0:step=3:target=grad"), ftcc::InvalidArgument);
  EXPECT_THROW(fr::parse_fault_spec("wireflip:rank=0:step=3:times=0"), ftcc::InvalidArgument);
  EXPECT_THROW(fr::parse_fault_spec("wireflip:rank=0:step=3:phase=allreduce"), ftcc::InvalidArgument);
  // The training driver makes it (train/wire_flip.hpp), never the process injector.
  fr::FaultInjector inj(fr::parse_fault_specs({"wireflip:rank=0:step=1"}), 0);
  EXPECT_EQ(inj.driver_faults().size(), 1u);
}

TEST(FaultSpec, ParsesBitflip) {
  const auto d = fr::parse_fault_spec("bitflip:rank=1:step=5");
  EXPECT_EQ(d.kind, fr::FaultKind::bitflip);
  EXPECT_EQ(d.target, fr::FlipTarget::param);
  EXPECT_EQ(d.bit, 20);
  EXPECT_EQ(d.times, 1);
  const auto g = fr::parse_fault_spec("bitflip:rank=0:step=9:target=grad:bit=31:times=3");
  EXPECT_EQ(g.target, fr::FlipTarget::grad);
  EXPECT_EQ(g.bit, 31);
  EXPECT_EQ(g.times, 3);
  EXPECT_EQ(fr::parse_fault_spec("bitflip:rank=0:step=9:target=optim:bit=0").target, fr::FlipTarget::optim);
  // A data fault: the training driver makes it, the process injector never acts on it.
  fr::FaultInjector inj(fr::parse_fault_specs({"bitflip:rank=0:step=1", "kill:rank=0:step=7"}), 0);
  ASSERT_EQ(inj.driver_faults().size(), 1U);
  EXPECT_EQ(inj.driver_faults()[0].step, 1);
  inj.at_step(1);  // would not return if it were treated as a process fault
}

void expect_rejected(const std::string& spec, const std::string& reason) {
  try {
    fr::parse_fault_spec(spec);
    ADD_FAILURE() << "accepted bad spec " << spec;
  } catch (const ftcc::InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(reason), std::string::npos) << "spec " << spec << " gave: " << m;
    EXPECT_NE(m.find("KIND:rank=R:step=S"), std::string::npos) << "message must show the grammar: " << m;
  }
}

TEST(FaultSpec, RejectsBadSpecsWithTheGrammar) {
  expect_rejected("", "unknown kind ''");
  expect_rejected("explode:rank=1:step=2", "unknown kind 'explode'");
  expect_rejected("kill:rank=1", "step=S is required");
  expect_rejected("kill:step=1", "rank=R is required");
  expect_rejected("kill:rank=x:step=1", "rank='x' is not an integer");
  expect_rejected("kill:rank=-1:step=1", "rank must be >= 0");
  expect_rejected("kill:rank=1:step=1:phase=lunch", "unknown phase 'lunch'");
  expect_rejected("kill:rank=1:step=1:color=red", "unknown field 'color'");
  expect_rejected("kill:rank=1:step=1:rank=2", "given twice");
  expect_rejected("delay:rank=1:step=1", "delay needs ms=M");
  expect_rejected("kill:rank=1:step=1:ms=5", "only applies to delay");
  expect_rejected("kill:rank1:step=1", "is not key=value");
  expect_rejected("bitflip:rank=1:step=1:target=weights", "unknown target 'weights' (param, grad or optim)");
  expect_rejected("bitflip:rank=1:step=1:bit=32", "bit must be <= 31");
  expect_rejected("bitflip:rank=1:step=1:times=0", "times must be >= 1");
  expect_rejected("bitflip:rank=1:step=1:phase=allreduce", "bitflip happens in the training step");
  expect_rejected("bitflip:rank=1:step=1:ms=5", "only applies to delay");
  expect_rejected("kill:rank=1:step=1:target=grad", "target= only applies to bitflip");
  expect_rejected("hang:rank=1:step=1:times=2", "times= only applies to bitflip");
  expect_rejected("slow:rank=1:step=1", "slow needs factor=F");
  expect_rejected("slow:rank=1:step=1:factor=1", "must be a number above 1 and at most 1000");
  expect_rejected("slow:rank=1:step=1:factor=abc", "must be a number above 1 and at most 1000");
  expect_rejected("slow:rank=1:step=1:factor=nan", "must be a number above 1 and at most 1000");
  expect_rejected("kill:rank=1:step=1:factor=3", "factor= only applies to slow");
  // Found by the fault_spec fuzzer: rank and ms are ints, so larger values used to wrap (here to
  // a negative rank; another value could have wrapped onto a real rank).
  expect_rejected("delay:rank=88888888880:step=7888888888888888:ms=500", "rank must be <= 2147483647");
  expect_rejected("delay:rank=1:step=1:ms=4294967296", "ms must be <= 2147483647");
  expect_rejected("kill:rank=1:step=99999999999999999999", "step='99999999999999999999' is too large");
}

TEST(FaultInjector, OffByDefaultAndOnlyForItsRank) {
  fr::FaultInjector off;
  EXPECT_FALSE(off.enabled());
  off.at_step(0);  // no-op
  auto specs = fr::parse_fault_specs({"kill:rank=3:step=1", "delay:rank=1:step=2:ms=1"});
  fr::FaultInjector mine(specs, 1);
  EXPECT_TRUE(mine.enabled());
  fr::FaultInjector other(specs, 0);
  EXPECT_FALSE(other.enabled());
}

TEST(FaultInjector, DelayFiresOnceAtItsStep) {
  auto specs = fr::parse_fault_specs({"delay:rank=0:step=2:ms=120"});
  fr::FaultInjector inj(specs, 0);
  auto time_step = [&](int s) {
    auto t0 = std::chrono::steady_clock::now();
    inj.at_step(s);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  EXPECT_LT(time_step(1), 100);
  EXPECT_GE(time_step(2), 120);
  EXPECT_LT(time_step(2), 100);  // each spec fires once
}

TEST(FaultInjector, PhaseOfOpNames) {
  EXPECT_EQ(fr::FaultInjector::phase_of_op("ring_allreduce"), fr::FaultPhase::allreduce);
  EXPECT_EQ(fr::FaultInjector::phase_of_op("tree_broadcast"), fr::FaultPhase::broadcast);
  EXPECT_EQ(fr::FaultInjector::phase_of_op("ring_allgather"), fr::FaultPhase::allgather);
  EXPECT_FALSE(fr::FaultInjector::phase_of_op("barrier").has_value());
}

}  // namespace
