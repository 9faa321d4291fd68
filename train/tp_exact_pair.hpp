// train/tp_exact_pair.hpp: tensor parallelism with the same bits on any number of shards
// (--parallel tp --deterministic).
//
// A column/row-parallel Linear pair (train/tp_shard.hpp) computed by tp's usual ops gives bits
// that depend on the shard count twice over: the row-parallel output and the column-parallel
// input gradient are float sums over the hidden features, cut at other places for another shard
// count and summed by an allreduce in the ring's order; and Eigen's kernels pick other code paths
// (register blocks, packet or scalar tails) for other slice widths, so even a sum over the batch
// rows can round differently for the same hidden feature. Here instead:
//  - every float result of the pair's own kernels is one element's sum in a fixed order, over the
//    batch rows or over the pair's input or output features, which no shard count cuts; the loops
//    vectorise across the elements, never across a sum, and the activations are scalar calls;
//  - the two sums over the hidden features are exact: each product a*w (exact in double) is
//    rounded once to 64-bit fixed point at a scale every rank derives from the same global maxima
//    (an allreduce-MAX of max|a| and max|w|: n_hidden * max|a| * max|w| * 2^e < 2^62, so no sum
//    can overflow), the integers are summed locally and by an int64 allreduce (any order, the same
//    bits), and the total is turned back into float once.
// The cost: no GEMM (the loops are a few times slower than Eigen's), and one int64 allreduce of
// the output (forward) and of the input gradient (backward) instead of a float one.
//
// The shard-wise parts are unit-tested against the whole pair over shard counts
// (tests/train/tp_exact_pair_test.cpp: bitwise); the pair in training by train_e2e.py
// tp_deterministic (one SHA-256 over rank counts, kills and a spare).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ftcc/comm/communicator.hpp"
#include "ftcc/nn/sequential.hpp"
#include "ftcc/tensor/tensor.hpp"
#include "ftcc/train/pinned_buffers.hpp"

namespace ftcc::train {

// out[i, n] += sum over k in [0, K) of A[i, k] * Bk[k, n], as fixed point at scale 2^e (each
// product rounded once, half to even). A is [R, K], Bk [K, N], out [R, N], all row-major.
// Throws ftcc::Error when a scaled product does not fit 64 bits (e was not from their maxima).
void accumulate_fixed_products(std::span<const float> A, std::span<const float> Bk, std::int64_t R, std::int64_t K,
                               std::int64_t N, int e, std::span<std::int64_t> out);

// The scale for sums of up to n_terms products bounded by max_a * max_b: the largest e with
// n_terms * max_a * max_b * 2^e < 2^62 (0 when the bound is 0). Throws when it is not finite.
int exact_product_exponent(float max_a, float max_b, std::int64_t n_terms);

// One column/row-parallel pair on this rank's slice: x [B, in] (whole), Wc [h, in], bc [h]
// (its rows), Wr [O, h] (its columns); the pair's hidden width is h_total on all ranks together.
// Tensors are float32, contiguous, on the CPU.
class ExactTpPair {
 public:
  ExactTpPair(nn::Activation act, std::int64_t h_total) : act_(act), h_total_(h_total) {}

  // pre = x Wc^T + bc, a = act(pre): this rank's slice of the hidden features.
  void hidden(const tensor::Tensor& x, const tensor::Tensor& Wc, const tensor::Tensor& bc);
  // z = a Wr^T summed exactly over the ranks of c: [B, O], the same on every rank (before the
  // row-parallel bias). NaN on every rank alike when some a or Wr is not finite.
  tensor::Tensor output(comm::Communicator& c, const tensor::Tensor& Wr, Pins& pins);
  // From dz = dL/dz [B, O]: adds this slice's gradients to Wc.grad(), bc.grad() and Wr.grad(),
  // and keeps dL/dpre for input_gradient.
  void slice_gradients(const tensor::Tensor& x, const tensor::Tensor& Wc, const tensor::Tensor& bc,
                       const tensor::Tensor& Wr, const tensor::Tensor& dz);
  // dL/dx [B, in] = dL/dpre Wc summed exactly over the ranks of c (after slice_gradients).
  tensor::Tensor input_gradient(comm::Communicator& c, const tensor::Tensor& Wc, Pins& pins);

  const std::vector<float>& activations() const { return a_; }  // [B, h]
  const std::vector<float>& pre_gradient() const { return dpre_; }  // [B, h]

 private:
  nn::Activation act_;
  std::int64_t h_total_;
  std::int64_t rows_ = 0, h_ = 0;
  std::vector<float> a_, dpre_;
};

}  // namespace ftcc::train
