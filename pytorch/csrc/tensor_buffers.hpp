// pytorch/csrc/tensor_buffers.hpp: torch tensors as comm/'s raw buffers (pointer, count, DType).
//
// comm/ works on contiguous host memory. A tensor that is contiguous on the CPU is used in place;
// any other (non-contiguous, or on a CUDA device) is staged through a contiguous host copy, and
// the result is copied back into it after the operation (copy_back). Staging and copying back run
// on the runtime's worker thread, in the order of the operations.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

#include "ftcc/comm/types.hpp"

namespace ftcc::torch_backend {

// The DType of t, or a c10::Error naming the op, the dtype and the ones supported.
comm::DType dtype_of(const at::Tensor& t, const char* op);
// comm's operator for op; AVG is SUM followed by a division and PREMUL_SUM a multiplication
// followed by SUM (floating types only); the bitwise ones are refused with one line.
comm::ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const char* op_name);
bool is_avg(const c10d::ReduceOp& op);
// PREMUL_SUM's factor (each input is multiplied by it, then summed), or 1 for the other ops.
double premul_factor(const c10d::ReduceOp& op);

// CUDA tensors: the caller's current streams are synchronized before an operation is queued (the
// worker then reads inputs the caller's kernels finished writing), and copy_back() synchronizes
// the worker's stream after it copies a result in (the operation completes with the data in place).
void sync_current_streams(const std::vector<at::Tensor>& ts);

// Checks the tensors a call is handed: one tensor (no per-device lists), a supported dtype, a
// CPU or CUDA device.
void check_single(const std::vector<at::Tensor>& ts, const char* op);
void check_tensor(const at::Tensor& t, const char* op);
// All tensors of a list have t's dtype and number of elements.
void check_same(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op, const char* what);

// Whether every tensor of the list has as many elements as `like` (an even collective).
bool same_numel(const std::vector<at::Tensor>& ts, const at::Tensor& like);
std::int64_t bytes_of(const at::Tensor& t);
// The tensors' elements, concatenated into one flat host tensor (undefined for none).
at::Tensor flat_cat(const std::vector<at::Tensor>& ts);
// outs[0], outs[1], ... <- consecutive runs of a flat result, of their sizes.
void write_split(const std::vector<at::Tensor>& outs, const at::Tensor& flat);
// outs[0], outs[1], ... <- consecutive byte runs of a kByte result, each read as its tensor's dtype
// (the coalesced collectives, whose tensors may differ in dtype).
void write_split_bytes(const std::vector<at::Tensor>& outs, const at::Tensor& bytes);

// The tensor's elements as one flat contiguous host tensor: t itself (a view) when it already is
// contiguous host memory, else a copy (read when the operation runs, as the worker's order says).
at::Tensor host_input(const at::Tensor& t);
// dst <- a flat result of dst.numel() elements (any device, any layout; CUDA: synchronized after).
void write_result(const at::Tensor& dst, const at::Tensor& flat);
// A flat host tensor of n elements of t's dtype (from 1 MiB, a block of host_block_pool.hpp).
at::Tensor host_empty(const at::Tensor& like, std::int64_t n);

// A contiguous host view of a tensor for the duration of one operation.
struct HostBuffer {
  at::Tensor user;   // the caller's tensor
  at::Tensor host;   // contiguous, on the CPU (user itself when it already is)
  explicit HostBuffer(const at::Tensor& t, bool copy_in = true);
  void* data() const { return host.data_ptr(); }
  std::size_t count() const { return static_cast<std::size_t>(host.numel()); }
  void copy_back() const;  // user <- host when they differ
};

}  // namespace ftcc::torch_backend
