#include "ftcc/train/mp_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/ops.hpp"

namespace ftcc::train {

Digest check_same_config(const TrainConfig& cfg, comm::Communicator& comm, const std::vector<int>& members) {
  const std::string canon = cfg.canonical();
  const Digest h = sha256_of_bytes(std::as_bytes(std::span<const char>(canon.data(), canon.size())));
  std::int64_t words[4];
  std::memcpy(words, h.data(), sizeof words);
  std::vector<std::int64_t> all(4 * static_cast<size_t>(comm.size()));
  comm::allgather(comm, words, all.data(), 4, comm::DType::i64);
  for (int r = 1; r < comm.size(); ++r) {
    const auto row = all.begin() + 4 * static_cast<std::ptrdiff_t>(r);
    if (!std::equal(row, row + 4, all.begin()))
      throw ftcc::InvalidArgument("ranks were started with different configurations: rank " +
                                  std::to_string(members[static_cast<size_t>(r)]) + " differs from rank " +
                                  std::to_string(members[0]) + " (start every rank with the same ftcc-train flags)");
  }
  return h;
}

void send_bytes(comm::Communicator& c, const Bytes& b, int peer, int tag) {
  FTCC_CHECK(b.size() % 4 == 0) << "state bytes not a multiple of 4";
  c.send(b.data(), b.size() / 4, comm::DType::i32, peer, tag);
}

void recv_bytes(comm::Communicator& c, Bytes& b, int peer, int tag) {
  FTCC_CHECK(b.size() % 4 == 0) << "state bytes not a multiple of 4";
  c.recv(b.data(), b.size() / 4, comm::DType::i32, peer, tag);
}

namespace {
data::Batch all_of(const data::Dataset& d) {
  std::vector<std::int64_t> ids(static_cast<size_t>(d.size()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
  return d.gather(ids);
}
}  // namespace

double mse_on(nn::Module& model, const data::Dataset& d) {
  tensor::NoGradGuard no_grad;
  auto b = all_of(d);
  return tensor::mse_loss(model(b.x), b.y).item();
}

FinalMetrics final_metrics(comm::Communicator& c, nn::Module* full, const data::Dataset& train,
                           const data::Dataset& test, bool classification) {
  double result[2] = {0, 0};
  std::int64_t digest_words[4] = {0, 0, 0, 0};
  static_assert(sizeof digest_words == sizeof(Digest));
  if (c.rank() == 0) {
    FTCC_CHECK(full != nullptr) << "final_metrics: rank 0 holds no gathered model";
    result[0] = mse_on(*full, train);
    result[1] = classification ? accuracy_on(*full, test) : mse_on(*full, test);
    const Digest d = sha256_of(full->named_parameters());
    std::memcpy(digest_words, d.data(), sizeof digest_words);
  }
  comm::broadcast(c, result, 2, comm::DType::f64, 0);
  comm::broadcast(c, digest_words, 4, comm::DType::i64, 0);
  FinalMetrics m;
  m.train_mse = result[0];
  m.eval = result[1];
  std::memcpy(m.digest.data(), digest_words, sizeof digest_words);
  return m;
}

double accuracy_on(nn::Module& model, const data::Dataset& d) {
  tensor::NoGradGuard no_grad;
  auto b = all_of(d);
  const auto pred = data::argmax_rows(model(b.x));
  std::int64_t ok = 0;
  for (size_t i = 0; i < pred.size(); ++i) ok += pred[i] == d.labels[i];
  return static_cast<double>(ok) / static_cast<double>(pred.size());
}

}  // namespace ftcc::train
