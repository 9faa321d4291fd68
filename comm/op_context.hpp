// comm/op_context.hpp: what one collective call works with (internal to comm/ and its tests).
//
// An OpContext binds a transport endpoint, the call's tag, its deadline, its name, the fault
// hook and scratch memory. Algorithms post sends and receives through it and poll with test();
// when a poll round makes no progress they call idle(), which backs off (spin briefly, then
// yield: ranks are often oversubscribed) and throws Timeout once the deadline has passed, naming
// the peers of the requests still outstanding. The destructor abandons whatever is still
// outstanding (the error path), poisoning the scratch if a receive could not be cancelled.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/transport.hpp"

namespace ftcc::comm {

class OpContext {
 public:
  using Handle = Transport::Handle;

  // A blocking collective on `comm`: its transport, next tag (keyed by `key`: collective_key in
  // comm/communicator.hpp), scratch and hook.
  OpContext(Communicator& comm, const char* op, double call_timeout_s, std::uint32_t key = 0);
  // Explicit pieces (nonblocking collectives run on a cloned transport with their own scratch).
  OpContext(Transport& transport, int tag, double timeout_s, const char* op, const FaultHook* hook, Scratch& scratch);
  // A part of `whole` on another endpoint of the same communicator (a hierarchical collective's
  // exchange between one rank per host: a SubgroupTransport that keeps the parent's tags): the same
  // tag, deadline, name, hooks and scratch, and the fault hook's steps continue whole's count.
  // A Timeout names the transport's peer p as names[p] (the communicator's ranks).
  OpContext(OpContext& whole, Transport& transport, const std::vector<int>& names);
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;
  ~OpContext();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const char* op() const { return op_; }
  int tag() const { return tag_; }

  Handle isend(const void* buf, std::size_t bytes, int peer);
  Handle irecv(void* buf, std::size_t bytes, int peer);
  // True once h completed (h is then invalid). Throws on failure.
  bool test(Handle h);
  // Polls until every handle completed (or throws Timeout / a failure).
  void wait_all(const Handle* hs, std::size_t n);
  void wait(Handle h) { wait_all(&h, 1); }

  // Call after a polling round that completed nothing; resets with progressed().
  void idle();
  // idle() for a wait on shared memory: a Timeout names `peer` (the communicator's rank) first,
  // until progressed().
  void idle_waiting_for(int peer) {
    waiting_for_ = peer;
    idle();
  }
  // The receive hook of this call (Communicator::receive_hook() when it started), or nullptr.
  const ReceiveHook* receive_hook() const { return receive_hook_; }
  // What isend does before posting: the fault hook (op, step), and the step count. For algorithms
  // whose "send" is a store to shared memory.
  void before_send() {
    if (hook_) (*hook_)(op_, step_);
    ++step_;
  }
  void progressed() {
    idle_rounds_ = 0;
    waiting_for_ = -1;
  }
  double elapsed_s() const;

  // The endpoint this call sends and receives through.
  Transport& transport() const { return t_; }

  // Slot 0: the pipeline engines; slot 1: the calling algorithm; 2: the hierarchical allreduce;
  // 3 and 4: the other hierarchical collectives (see Scratch).
  std::byte* scratch(std::size_t bytes, int slot = 0) { return scratch_.get(bytes, slot); }

 private:
  struct Pending {
    Handle h;
    int peer;
    bool recv;
    void* buf;  // a receive's, for the receive hook
    std::size_t bytes;
  };
  [[noreturn]] void throw_timeout();
  void forget(Handle h);

  Transport& t_;
  int tag_;
  const char* op_;
  const FaultHook* hook_;
  const ReceiveHook* receive_hook_;  // Communicator::receive_hook() when the call started
  Scratch& scratch_;
  detail::WaitInProgress waiting_;  // the whole collective counts as waiting for peers
  int rank_, size_;
  int step_ = 0;
  unsigned idle_rounds_ = 0;
  int waiting_for_ = -1;  // idle_waiting_for's peer
  std::chrono::steady_clock::time_point start_, deadline_;
  std::vector<Pending> pending_;
  OpContext* whole_ = nullptr;              // the part-of constructor's
  const std::vector<int>* names_ = nullptr;  // its peers' names
};

}  // namespace ftcc::comm
