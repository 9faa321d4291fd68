#include "ftcc/comm/reduction_audit.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/collectives.hpp"
#include "ftcc/comm/kept_buffer.hpp"
#include "ftcc/comm/op_context.hpp"

namespace ftcc::comm {
namespace {

constexpr int kLanes = 8;  // independent accumulators (the loop vectorises); weight = lane + 1
constexpr std::size_t kWords = 5;  // per buffer: contributed exact, value, magnitude; result exact, value
constexpr std::size_t kProbeBytes = std::size_t{1} << 20;  // at most this much of a sample travels

// Lane l holds the elements i with i % kLanes == l, all of weight l + 1: the weights are applied
// once per lane at the end (the same sum: the weighted sum distributes over each lane's).
template <class T>
SumChecksum integer_checksum(const T* v, std::size_t n) {
  std::uint64_t lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<std::uint64_t>(static_cast<std::int64_t>(v[i + l]));
  for (int l = 0; i < n; ++i, ++l) lane[l] += static_cast<std::uint64_t>(static_cast<std::int64_t>(v[i]));
  SumChecksum c;
  c.count = n;
  for (int l = 0; l < kLanes; ++l) c.exact += lane[l] * static_cast<std::uint64_t>(l + 1);
  return c;
}

template <class T>
SumChecksum float_checksum(const T* v, std::size_t n) {
  double sum[kLanes] = {}, mag[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double x = static_cast<double>(v[i + l]);
      sum[l] += x;
      mag[l] += std::fabs(x);
    }
  for (int l = 0; i < n; ++i, ++l) {
    const double x = static_cast<double>(v[i]);
    sum[l] += x;
    mag[l] += std::fabs(x);
  }
  SumChecksum c;
  c.count = n;
  for (int l = 0; l < kLanes; ++l) {
    c.value += sum[l] * (l + 1);
    c.magnitude += mag[l] * (l + 1);
  }
  return c;
}

bool integer(DType t) { return t == DType::i32 || t == DType::i64; }

// The largest |checksum(result) - sum of checksums(contributions)| float rounding can explain.
double tolerance(DType t, int ranks, std::size_t count, double magnitude) {
  const double u = t == DType::f32 ? 0x1p-24 : 0x1p-53;
  return 2.0 * ((ranks - 1) * u + static_cast<double>(count + static_cast<std::size_t>(ranks)) * 0x1p-53) * magnitude;
}

// A 64-bit digest of bytes, 8 at a time (multiply and xor-shift; not cryptographic: it looks
// for flipped bits, not for an adversary).
std::uint64_t digest(const std::byte* p, std::size_t n) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  for (; i < n; ++i) h = (h ^ static_cast<std::uint64_t>(p[i])) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

// Sends this rank's probe (sample + its digest) to `to` and receives one from `from`; returns
// whether the received one's digest holds. One collective call (its own tag).
bool probe_once(Communicator& comm, const std::vector<std::byte>& mine, int to, int from) {
  const KeptBuffer<std::vector<std::byte>> kept(mine.size());
  std::vector<std::byte>& got = *kept;
  OpContext ctx(comm, "link_probe", 0);
  const OpContext::Handle hs[2] = {ctx.irecv(got.data(), got.size(), from), ctx.isend(mine.data(), mine.size(), to)};
  ctx.wait_all(hs, 2);
  std::uint64_t said;
  std::memcpy(&said, got.data() + got.size() - 8, 8);
  return digest(got.data(), got.size() - 8) == said;
}

}  // namespace

SumChecksum sum_checksum(const void* buf, std::size_t count, DType dtype) {
  switch (dtype) {
    case DType::f32: return float_checksum(static_cast<const float*>(buf), count);
    case DType::f64: return float_checksum(static_cast<const double*>(buf), count);
    case DType::i32: return integer_checksum(static_cast<const std::int32_t*>(buf), count);
    case DType::i64: return integer_checksum(static_cast<const std::int64_t*>(buf), count);
    default: break;
  }
  FTCC_REQUIRE(false) << "sum_checksum: dtype " << to_string(dtype)
                      << " is not checked (f32, f64, i32 and i64 are; the checksum needs a linear sum)";
  return {};
}

ReductionAudit audit_reductions(Communicator& comm, std::span<const SumChecksum> contributed,
                                std::span<const SumChecksum> results, DType dtype) {
  FTCC_REQUIRE(contributed.size() == results.size())
      << "audit_reductions: " << contributed.size() << " contributions' checksums and " << results.size() << " results'";
  const std::size_t n = contributed.size(), p = static_cast<std::size_t>(comm.size());
  const KeptBuffer<std::vector<std::uint64_t>> kept(p * n * kWords);
  std::vector<std::uint64_t>& all = *kept;
  std::uint64_t* mine = all.data() + static_cast<std::size_t>(comm.rank()) * n * kWords;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t* w = mine + i * kWords;
    w[0] = contributed[i].exact;
    w[1] = std::bit_cast<std::uint64_t>(contributed[i].value);
    w[2] = std::bit_cast<std::uint64_t>(contributed[i].magnitude);
    w[3] = results[i].exact;
    w[4] = std::bit_cast<std::uint64_t>(results[i].value);
  }
  allgather(comm, nullptr, all.data(), n * kWords, DType::i64);
  ReductionAudit audit;
  std::vector<bool> wrong(p, false);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t exact = 0;
    double value = 0, magnitude = 0;
    for (std::size_t r = 0; r < p; ++r) {
      const std::uint64_t* w = all.data() + (r * n + i) * kWords;
      exact += w[0];
      value += std::bit_cast<double>(w[1]);
      magnitude += std::bit_cast<double>(w[2]);
    }
    // A non-finite contribution: nothing to compare (the caller's finiteness check sees it).
    if (!integer(dtype) && !(std::isfinite(value) && std::isfinite(magnitude))) continue;
    const double tol = integer(dtype) ? 0 : tolerance(dtype, comm.size(), contributed[i].count, magnitude);
    bool bad = false;
    for (std::size_t r = 0; r < p; ++r) {
      const std::uint64_t* w = all.data() + (r * n + i) * kWords;
      const bool off = integer(dtype) ? w[3] != exact : !(std::fabs(std::bit_cast<double>(w[4]) - value) <= tol);
      if (off) wrong[r] = bad = true;
    }
    if (bad) audit.bad_buffers.push_back(i);
  }
  for (std::size_t r = 0; r < p; ++r)
    if (wrong[r]) audit.wrong_at.push_back(static_cast<int>(r));
  return audit;
}

std::string LinkProbe::links() const {
  if (bad_links.empty()) return "none";
  std::string out;
  for (const Link& l : bad_links)
    out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(l.from) + " -> rank " + std::to_string(l.to);
  return out;
}

LinkProbe probe_links(Communicator& comm, const void* sample, std::size_t bytes) {
  const int p = comm.size(), r = comm.rank();
  LinkProbe out;
  if (p < 2) return out;
  // Kept if a probe fails: MPI may still read a send of an interrupted probe.
  const KeptBuffer<std::vector<std::byte>> kept_mine(std::min(bytes, kProbeBytes) + 8);
  std::vector<std::byte>& mine = *kept_mine;
  std::memcpy(mine.data(), sample, mine.size() - 8);
  const std::uint64_t d = digest(mine.data(), mine.size() - 8);
  std::memcpy(mine.data() + mine.size() - 8, &d, 8);
  const int succ = (r + 1) % p, pred = (r + p - 1) % p;
  // ok[0]: what came from pred was intact; ok[1]: what came from succ (3+ ranks).
  const KeptBuffer<std::vector<std::int32_t>> kept(static_cast<std::size_t>(2 * p), 1);
  std::vector<std::int32_t>& ok = *kept;
  ok[static_cast<std::size_t>(2 * r)] = probe_once(comm, mine, succ, pred) ? 1 : 0;
  if (p >= 3) ok[static_cast<std::size_t>(2 * r + 1)] = probe_once(comm, mine, pred, succ) ? 1 : 0;
  allgather(comm, nullptr, ok.data(), 2, DType::i32);
  std::vector<int> bad_in(static_cast<std::size_t>(p), 0), bad_out(static_cast<std::size_t>(p), 0);
  for (int q = 0; q < p; ++q) {
    const int from[2] = {(q + p - 1) % p, (q + 1) % p};
    for (int k = 0; k < (p >= 3 ? 2 : 1); ++k)
      if (ok[static_cast<std::size_t>(2 * q + k)] == 0) {
        out.bad_links.push_back({from[k], q});
        ++bad_in[static_cast<std::size_t>(q)];
        ++bad_out[static_cast<std::size_t>(from[k])];
      }
  }
  const int probes = p >= 3 ? 2 : 1;  // each rank receives (and sends) this many
  for (int q = 0; q < p; ++q)
    if (bad_in[static_cast<std::size_t>(q)] == probes || bad_out[static_cast<std::size_t>(q)] == probes) out.suspects.push_back(q);
  return out;
}

}  // namespace ftcc::comm
