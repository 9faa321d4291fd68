#include "ftcc/comm/memory_transport.hpp"

#include <cstring>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/errors.hpp"

namespace ftcc::comm {

std::shared_ptr<MemoryWorld> MemoryWorld::create(int size) {
  return std::shared_ptr<MemoryWorld>(new MemoryWorld(size));
}

MemoryWorld::MemoryWorld(int size) : size_(size), failed_(new std::atomic<bool>[static_cast<std::size_t>(size)]) {
  FTCC_CHECK(size >= 1) << "MemoryWorld needs at least one rank";
  for (int r = 0; r < size; ++r) failed_[static_cast<std::size_t>(r)].store(false);
}

std::unique_ptr<Transport> MemoryWorld::endpoint(int rank) {
  FTCC_CHECK(rank >= 0 && rank < size_) << "rank " << rank << " of " << size_;
  return std::make_unique<MemoryTransport>(shared_from_this(), rank);
}

MemoryWorld::Channel& MemoryWorld::channel(int src, int dst, int tag) { return channels_[{src, dst, tag}]; }

Transport::Handle MemoryTransport::alloc_slot() {
  if (free_.empty()) {
    slots_.emplace_back();
    return static_cast<Handle>(slots_.size() - 1);
  }
  Handle h = free_.back();
  free_.pop_back();
  return h;
}

void MemoryTransport::release(Handle h) {
  slots_[h].busy = false;
  free_.push_back(h);
}

Transport::Handle MemoryTransport::isend(const void* buf, std::size_t bytes, int peer, int tag, const char* op) {
  FTCC_CHECK(peer >= 0 && peer < size()) << op << ": send to rank " << peer << " of " << size();
  const Handle h = alloc_slot();
  slots_[h] = Slot{nullptr, bytes, peer, tag, 0, false, true};
  std::lock_guard<std::mutex> lock(world_->mu_);
  auto& ch = world_->channel(rank_, peer, tag);
  auto& msg = ch.messages[ch.sent++];
  msg.resize(bytes);
  if (bytes) std::memcpy(msg.data(), buf, bytes);
  return h;
}

Transport::Handle MemoryTransport::irecv(void* buf, std::size_t bytes, int peer, int tag, const char* op) {
  FTCC_CHECK(peer >= 0 && peer < size()) << op << ": receive from rank " << peer << " of " << size();
  const Handle h = alloc_slot();
  std::lock_guard<std::mutex> lock(world_->mu_);
  auto& ch = world_->channel(peer, rank_, tag);
  slots_[h] = Slot{buf, bytes, peer, tag, ch.posted++, true, true};
  return h;
}

bool MemoryTransport::test(Handle h, const char* op) {
  Slot& s = slots_[h];
  if (world_->failed(s.peer)) {
    const int peer = s.peer;
    release(h);
    throw ProcessFailed(op, {peer}, 0);
  }
  if (!s.recv) {
    release(h);
    return true;
  }
  std::vector<std::byte> msg;
  {
    std::lock_guard<std::mutex> lock(world_->mu_);
    auto& ch = world_->channel(s.peer, rank_, s.tag);
    auto it = ch.messages.find(s.ordinal);
    if (it == ch.messages.end()) return false;
    msg = std::move(it->second);
    ch.messages.erase(it);
  }
  if (msg.size() != s.bytes) {
    const std::size_t want = s.bytes;
    release(h);
    throw CommError(op, "message size mismatch: expected " + std::to_string(want) + " bytes, got " +
                            std::to_string(msg.size()));
  }
  if (s.bytes) std::memcpy(s.buf, msg.data(), s.bytes);
  release(h);
  return true;
}

bool MemoryTransport::abandon(Handle h) noexcept {
  if (slots_[h].busy) release(h);
  return true;
}

}  // namespace ftcc::comm
