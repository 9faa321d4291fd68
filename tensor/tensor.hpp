// tensor/tensor.hpp: the ftcc tensor, a shared handle to row-major contiguous data with autograd.
//
// A short tour:
//  * A Tensor is a cheap handle (shared_ptr). Copying the handle aliases the same tensor; use
//    clone() for a deep copy and to(device) to move data between the CPU and a CUDA device.
//  * Storage is always contiguous, row-major. rows(b, e) returns a *view* of rows [b, e) of the
//    first dimension that shares storage with its parent: this is how a batch is cut into
//    micro-batches or shards without copies. data() of a view points into the parent buffer.
//  * Autograd: a tensor with requires_grad() that is produced by an op (tensor/ops.hpp) remembers
//    the op (its grad_fn). backward() on a scalar walks that graph once, in reverse, and *adds*
//    each leaf's gradient into leaf.grad(). Leaves that require grad own a gradient buffer from the
//    moment requires_grad_(true) is called, so grad().data() is a stable pointer that a trainer can
//    allreduce in place; zero_grad() fills it with zeros and keeps the buffer.
//  * NoGradGuard (tensor/autograd.hpp) turns recording off in a scope (evaluation, optimizer steps).
//
// Errors (wrong dtype, shape, device) throw ftcc::InvalidArgument with file:line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ftcc/tensor/dtype.hpp"
#include "ftcc/tensor/storage.hpp"

namespace ftcc::tensor {

class Node;  // tensor/autograd.hpp

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::int64_t offset = 0;  // in elements, from the start of storage
  Shape shape;
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // leaves only; same shape, dtype and device
  std::shared_ptr<Node> grad_fn;     // set on op outputs that require grad
  std::function<void()> grad_hook;   // leaves only: run_backward calls it after accumulating into grad
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- construction -------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::CPU);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::CPU);
  // Copies `values` (row-major, numel(shape) of them) into a new CPU tensor of the given dtype.
  static Tensor from_vector(const Shape& shape, std::span<const float> values, DType dtype = DType::f32);
  static Tensor from_vector(const Shape& shape, std::span<const double> values, DType dtype = DType::f64);

  // ---- properties ---------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int dim() const { return static_cast<int>(shape().size()); }
  std::int64_t size(int d) const;
  std::int64_t numel() const;
  DType dtype() const;
  Device device() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }

  // Raw element pointers (device pointers for CUDA tensors). data() requires float32.
  float* data() const;
  template <class T>
  T* data_as() const;
  void* raw_data() const;

  // ---- views and copies ---------------------------------------------------------------------
  // Rows [begin, end) of dimension 0, sharing storage. Differentiable: the gradient flows back
  // into the matching rows of the parent.
  Tensor rows(std::int64_t begin, std::int64_t end) const;
  // Same storage, new shape with the same numel; not differentiable (use on data, not graphs).
  Tensor reshape(const Shape& shape) const;
  // Elements [offset, offset + numel(shape)) of this tensor, as a tensor of `shape` sharing its
  // storage; not differentiable. Throws when the range is outside this tensor.
  Tensor view(std::int64_t offset, const Shape& shape) const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor clone() const;   // deep copy, same device and dtype, detached from the graph
  Tensor detach() const;  // same storage, no graph, no requires_grad
  // Overwrites this tensor's elements with src's (same numel; any device, converting dtype).
  void copy_(const Tensor& src) const;
  void fill_(double value) const;
  // Host copies of the elements, converted.
  std::vector<float> to_vector() const;
  std::vector<double> to_vector_f64() const;
  double item() const;  // the value of a one-element tensor

  // ---- autograd -----------------------------------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as trainable and allocates its zeroed gradient buffer (idempotent).
  const Tensor& requires_grad_(bool on = true) const;
  bool is_leaf() const;
  Tensor grad() const;  // undefined for non-leaves and tensors that do not require grad
  void zero_grad() const;
  // Makes `buffer` (same shape, dtype and device; usually a view into one arena) this leaf's
  // gradient buffer from now on, with the current gradient copied into it. Throws otherwise.
  void set_grad_buffer(const Tensor& buffer) const;
  // `hook` runs each time a backward pass has added this leaf's gradient (once per backward: the
  // contributions of one pass are summed first); an empty function removes it. For gradient
  // buckets that are reduced while the backward pass goes on (train/gradient_reducer.hpp).
  void set_grad_hook(std::function<void()> hook) const;
  // Reverse pass from this one-element tensor, seeded with 1.
  void backward() const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace ftcc::tensor
