#include "ftcc/train/state_sync.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/kept_buffer.hpp"
#include "ftcc/train/run_common.hpp"
#include "ftcc/train/state_hash.hpp"

namespace ftcc::train {

namespace fc = ftcc::comm;

int newest_holder(const recovery::RecoveryEvent& ev) {
  const auto joined = [&](std::size_t i) {
    return std::find(ev.joined.begin(), ev.joined.end(), ev.survivors[i]) != ev.joined.end();
  };
  for (std::size_t i = 0; i < ev.committed.size() && i < ev.survivors.size(); ++i)
    if (ev.committed[i] == ev.committed_max && !joined(i)) return static_cast<int>(i);
  throw ftcc::Error("no survivor holds the training state of step " + std::to_string(ev.committed_max));
}

std::int64_t sync_state(fc::Communicator& comm, int root, const nn::NamedTensors& tensors,
                        std::span<std::int64_t> position) {
  FTCC_CHECK(root >= 0 && root < comm.size()) << "sync_state: root " << root << " outside a group of " << comm.size();
  std::int64_t sent = 0;
  const fc::KeptBuffer<std::vector<std::int64_t>> kept_words(position.begin(), position.end());
  std::vector<std::int64_t>& words = *kept_words;
  if (!words.empty()) fc::broadcast(comm, words.data(), words.size(), fc::DType::i64, root);
  std::copy(words.begin(), words.end(), position.begin());
  sent += static_cast<std::int64_t>(words.size() * sizeof(std::int64_t));
  const bool host = std::all_of(tensors.begin(), tensors.end(),
                                [](const auto& nt) { return nt.second.device() == tensor::Device::CPU; });
  if (host) {
    for (const auto& [name, t] : tensors) {
      FTCC_CHECK(t.nbytes() % 4 == 0) << "sync_state: tensor '" << name << "' has " << t.nbytes()
                                      << " bytes, not a multiple of 4";
      fc::broadcast(comm, t.raw_data(), t.nbytes() / 4, fc::DType::i32, root);
      sent += static_cast<std::int64_t>(t.nbytes());
    }
  } else {
    const fc::KeptBuffer<std::vector<std::byte>> kept_bytes(nn::pack_bytes(tensors));
    std::vector<std::byte>& bytes = *kept_bytes;
    FTCC_CHECK(bytes.size() % 4 == 0) << "sync_state: " << bytes.size() << " bytes of state, not a multiple of 4";
    fc::broadcast(comm, bytes.data(), bytes.size() / 4, fc::DType::i32, root);
    if (comm.rank() != root) nn::unpack_bytes(tensors, bytes);
    sent += static_cast<std::int64_t>(bytes.size());
  }
  // One digest of the tensors and the words: every rank must now hold root's.
  const Digest d = sha256_of(tensors);
  std::vector<std::byte> both(d.size() + words.size() * sizeof(std::int64_t));
  std::memcpy(both.data(), d.data(), d.size());
  if (!words.empty()) std::memcpy(both.data() + d.size(), words.data(), words.size() * sizeof(std::int64_t));
  if (const auto bad = ranks_differing(comm, sha256_of_bytes(both)); !bad.empty())
    throw ftcc::Error("sync_state: after the transfer from rank " + std::to_string(root) + ", rank " +
                      std::to_string(bad[0]) + " holds another state than rank 0 (tensors of other shapes or "
                      "dtypes on some rank, or a copy gone wrong)");
  return sent;
}

}  // namespace ftcc::train
