#include "ftcc/train/state_hash.hpp"

#include <openssl/evp.h>

#include <memory>

#include "ftcc/base/error.hpp"

namespace ftcc::train {
namespace {

struct MdCtx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  MdCtx() {
    FTCC_INVARIANT(ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1) << "SHA-256 init failed";
  }
  ~MdCtx() { EVP_MD_CTX_free(ctx); }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx, p, n); }
  Digest finish() {
    Digest d{};
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx, d.data(), &len);
    return d;
  }
};

}  // namespace

Digest sha256_of(const nn::NamedTensors& list) {
  MdCtx md;
  for (const auto& [name, t] : list) {
    md.update(name.data(), name.size() + 1);  // with the terminating NUL: names cannot run together
    for (auto s : t.shape()) md.update(&s, sizeof s);
    const auto host = t.device() == tensor::Device::CPU ? t : t.to(tensor::Device::CPU);
    md.update(host.raw_data(), host.nbytes());
  }
  return md.finish();
}

Digest sha256_of_bytes(std::span<const std::byte> bytes) {
  MdCtx md;
  md.update(bytes.data(), bytes.size());
  return md.finish();
}

std::string to_hex(const Digest& d) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (auto b : d) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

}  // namespace ftcc::train
