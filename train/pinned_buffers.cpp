#include "ftcc/train/pinned_buffers.hpp"

#include "ftcc/base/error.hpp"

namespace ftcc::train {
namespace {
std::size_t words(std::span<const std::byte> b) {
  FTCC_INVARIANT(b.size() % 4 == 0) << "state bytes not a multiple of 4 (" << b.size() << ")";
  return b.size() / 4;
}
}  // namespace

void send_bytes(comm::Communicator& c, std::span<const std::byte> b, int peer, int tag) {
  c.send(b.data(), words(b), comm::DType::i32, peer, tag);
}
void recv_bytes(comm::Communicator& c, std::span<std::byte> b, int peer, int tag) {
  c.recv(b.data(), words(b), comm::DType::i32, peer, tag);
}
comm::P2PRequest isend_bytes(comm::Communicator& c, std::span<const std::byte> b, int peer, int tag) {
  return c.isend(b.data(), words(b), comm::DType::i32, peer, tag);
}
comm::P2PRequest irecv_bytes(comm::Communicator& c, std::span<std::byte> b, int peer, int tag) {
  return c.irecv(b.data(), words(b), comm::DType::i32, peer, tag);
}

}  // namespace ftcc::train
