// comm/reduction_audit.hpp: checks that a SUM allreduce delivered the sum of its contributions
// (corruption in transit: a flipped bit in a message, a bad link, a rank's faulty memory on the
// way), and points at the link that corrupts.
//
// A checksum is linear: chk(a + b) = chk(a) + chk(b). Each rank takes the checksum of what it
// contributed before the allreduce and of what it got after; audit_reductions() allgathers both,
// and a rank whose result's checksum is not the sum of the contributions' got a changed result.
//   integers (i32, i64): a weighted sum mod 2^64 of the elements: exact, any changed bit is seen
//                        (the fixed-point sums of --deterministic are i64);
//   floats (f32, f64):   the weighted sum in double, beside the weighted sum of magnitudes M;
//                        float rounding lets a correct result differ by up to
//                        ((p - 1) u + kBlock * 2^-53) * sum of M over the p ranks (u: the dtype's
//                        unit roundoff, kBlock: the checksum's block), so only a change larger
//                        than that is seen (a flipped exponent bit or a high mantissa bit of a
//                        large element; a low mantissa bit of a small one is not).
// Weights cycle 1..8 over the elements, so elements that trade places are seen too.
//
// probe_links() runs once a mismatch has survived a repeat: every rank sends a sample with its
// digest to its ring successor and, with 3+ ranks, to its predecessor; each receiver checks the
// digest. It names the links that changed data and the ranks every one of whose incoming (or
// outgoing) probes was changed (a rank's receive or send path). With 2 ranks both directions of
// the one link name both ranks: no single culprit.
//
// All ranks must call these collectively, in the same order; every rank gets the same result
// (it is computed from allgathered values). Failures throw as any collective does (errors.hpp).
// The small control messages of the audit itself are trusted (a corrupted checksum shows up as a
// mismatch, never as a clean audit of a changed result).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/types.hpp"

namespace ftcc::comm {

struct SumChecksum {
  std::uint64_t exact = 0;  // integers: the weighted sum mod 2^64
  double value = 0;         // floats: the weighted sum
  double magnitude = 0;     // floats: the weighted sum of |elements|
  std::size_t count = 0;    // elements summed (the same on every rank for one buffer)
};

// The checksum of `count` elements of `dtype` (f32, f64, i32 or i64; others throw InvalidArgument).
SumChecksum sum_checksum(const void* buf, std::size_t count, DType dtype);

struct ReductionAudit {
  std::vector<std::size_t> bad_buffers;  // indices of the buffers whose result was wrong somewhere
  std::vector<int> wrong_at;             // ranks (of comm) that got a wrong result, ascending
  bool clean() const { return bad_buffers.empty(); }
};

// contributed[i], results[i]: this rank's checksums of buffer i before and after its allreduce
// (the same number of buffers on every rank, all of `dtype`).
ReductionAudit audit_reductions(Communicator& comm, std::span<const SumChecksum> contributed,
                                std::span<const SumChecksum> results, DType dtype);

struct LinkProbe {
  struct Link {
    int from, to;  // ranks of comm
  };
  std::vector<Link> bad_links;
  std::vector<int> suspects;  // ranks all of whose probed receives, or all of whose sends, changed
  // "rank 1 -> rank 2, rank 3 -> rank 2" or "none".
  std::string links() const;
};

// sample: any bytes of this rank (the same size on every rank is not required).
LinkProbe probe_links(Communicator& comm, const void* sample, std::size_t bytes);

}  // namespace ftcc::comm
