// comm/memory_transport.hpp: ranks as threads of one process, messages through shared memory.
//
// For schedule tests that need no MPI: make a MemoryWorld of n ranks, give each thread
// Communicator(world->endpoint(r)), run the same collectives. Sends are eager (copied at isend,
// complete at once); a receive completes when the matching message (same source, same tag, same
// ordinal) is there. mark_failed(r) makes every later test() of a request with peer r throw
// ProcessFailed, to check that failures propagate out of the algorithms.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "ftcc/comm/transport.hpp"

namespace ftcc::comm {

class MemoryWorld : public std::enable_shared_from_this<MemoryWorld> {
 public:
  static std::shared_ptr<MemoryWorld> create(int size);
  int size() const { return size_; }
  std::unique_ptr<Transport> endpoint(int rank);
  void mark_failed(int rank) { failed_[static_cast<std::size_t>(rank)].store(true); }
  bool failed(int rank) const { return failed_[static_cast<std::size_t>(rank)].load(); }

 private:
  friend class MemoryTransport;
  explicit MemoryWorld(int size);
  struct Channel {
    std::map<std::uint64_t, std::vector<std::byte>> messages;  // by send ordinal
    std::uint64_t sent = 0, posted = 0;
  };
  Channel& channel(int src, int dst, int tag);  // caller holds mu_

  int size_;
  std::mutex mu_;
  std::map<std::tuple<int, int, int>, Channel> channels_;
  std::unique_ptr<std::atomic<bool>[]> failed_;
};

class MemoryTransport final : public Transport {
 public:
  MemoryTransport(std::shared_ptr<MemoryWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  int tag_upper_bound() const override { return 32767; }
  Handle isend(const void* buf, std::size_t bytes, int peer, int tag, const char* op) override;
  Handle irecv(void* buf, std::size_t bytes, int peer, int tag, const char* op) override;
  bool test(Handle h, const char* op) override;
  bool abandon(Handle h) noexcept override;
  std::unique_ptr<Transport> clone() const override { return std::make_unique<MemoryTransport>(world_, rank_); }

 private:
  struct Slot {
    void* buf = nullptr;
    std::size_t bytes = 0;
    int peer = -1, tag = 0;
    std::uint64_t ordinal = 0;
    bool recv = false, busy = false;
  };
  Handle alloc_slot();
  void release(Handle h);

  std::shared_ptr<MemoryWorld> world_;
  int rank_;
  std::vector<Slot> slots_;
  std::vector<Handle> free_;
};

}  // namespace ftcc::comm
