#include "ftcc/tensor/tensor.hpp"

#include <sstream>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/kernels.hpp"

namespace ftcc::tensor {

std::int64_t shape_numel(const Shape& s) {
  FTCC_CHECK(s.size() <= static_cast<std::size_t>(kMaxDims)) << "tensors have at most " << kMaxDims
                                                             << " dimensions, got " << s.size();
  std::int64_t n = 1;
  for (auto d : s) {
    FTCC_CHECK(d >= 0) << "negative extent in shape " << shape_str(s);
    // Bounded so that the byte count of any dtype (<= 8 bytes) still fits in int64.
    FTCC_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= kMaxNumel)
        << "shape " << shape_str(s) << " has more than " << kMaxNumel << " elements";
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

namespace {
std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype, Device device) {
  FTCC_CHECK(dtype == DType::f32 || dtype == DType::f64)
      << "tensors hold float32 or float64, not " << dtype_name(dtype) << " (shape " << shape_str(shape) << ")";
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  return impl;
}

template <class Src>
Tensor from_host(const Shape& shape, std::span<const Src> values, DType dtype) {
  FTCC_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape))
      << "from_vector: " << values.size() << " values for shape " << shape_str(shape);
  Tensor t = Tensor::empty(shape, dtype);
  if (dtype == DType::f32) {
    float* p = t.data_as<float>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<float>(values[i]);
  } else {
    double* p = t.data_as<double>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<double>(values[i]);
  }
  return t;
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) { return Tensor(make_impl(shape, dtype, device)); }

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, std::span<const float> values, DType dtype) {
  return from_host<float>(shape, values, dtype);
}
Tensor Tensor::from_vector(const Shape& shape, std::span<const double> values, DType dtype) {
  return from_host<double>(shape, values, dtype);
}

void Tensor::check_defined(const char* what) const {
  FTCC_CHECK(impl_ != nullptr) << what << " on an undefined tensor";
}

const Shape& Tensor::shape() const {
  check_defined("shape()");
  return impl_->shape;
}

std::int64_t Tensor::size(int d) const {
  FTCC_CHECK(d >= 0 && d < dim()) << "size(" << d << ") of a " << dim() << "-D tensor";
  return impl_->shape[static_cast<std::size_t>(d)];
}

std::int64_t Tensor::numel() const { return shape_numel(shape()); }

DType Tensor::dtype() const {
  check_defined("dtype()");
  return impl_->dtype;
}

Device Tensor::device() const {
  check_defined("device()");
  return impl_->storage->device();
}

void* Tensor::raw_data() const {
  check_defined("data()");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<std::int64_t>(dtype_size(impl_->dtype));
}

float* Tensor::data() const { return data_as<float>(); }

template <class T>
T* Tensor::data_as() const {
  check_defined("data()");
  FTCC_CHECK(impl_->dtype == dtype_of<T>()) << "data_as<" << dtype_name(dtype_of<T>()) << ">() on a "
                                            << dtype_name(impl_->dtype) << " tensor";
  return static_cast<T*>(raw_data());
}
template float* Tensor::data_as<float>() const;
template double* Tensor::data_as<double>() const;

namespace {
// Gradient of a row slice: the slice's gradient placed in a zero tensor of the parent's shape.
class RowsNode : public Node {
 public:
  RowsNode(Shape parent_shape, std::int64_t begin) : parent_shape_(std::move(parent_shape)), begin_(begin) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor full = Tensor::zeros(parent_shape_, g.dtype(), g.device());
    full.rows(begin_, begin_ + g.size(0)).copy_(g);
    return {full};
  }
  const char* name() const override { return "rows"; }

 private:
  Shape parent_shape_;
  std::int64_t begin_;
};
}  // namespace

Tensor Tensor::rows(std::int64_t begin, std::int64_t end) const {
  check_defined("rows()");
  FTCC_CHECK(dim() >= 1) << "rows() of a 0-D tensor";
  FTCC_CHECK(0 <= begin && begin <= end && end <= size(0))
      << "rows(" << begin << ", " << end << ") of a tensor with " << size(0) << " rows";
  auto v = std::make_shared<TensorImpl>();
  v->storage = impl_->storage;
  v->dtype = impl_->dtype;
  v->shape = impl_->shape;
  v->shape[0] = end - begin;
  std::int64_t row = size(0) == 0 ? 0 : numel() / size(0);
  v->offset = impl_->offset + begin * row;
  Tensor out(std::move(v));
  if (needs_grad({this})) attach(out, std::make_shared<RowsNode>(impl_->shape, begin), {*this});
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  FTCC_CHECK(shape_numel(shape) == numel()) << "reshape " << shape_str(this->shape()) << " to " << shape_str(shape);
  auto v = std::make_shared<TensorImpl>(*impl_);
  v->shape = shape;
  v->requires_grad = false;
  v->grad.reset();
  v->grad_fn.reset();
  v->grad_hook = nullptr;
  return Tensor(std::move(v));
}

Tensor Tensor::view(std::int64_t offset, const Shape& shape) const {
  check_defined("view()");
  const std::int64_t n = shape_numel(shape);
  FTCC_CHECK(offset >= 0 && n <= numel() - offset)
      << "view of " << n << " elements at " << offset << " in a tensor of " << numel();
  auto v = std::make_shared<TensorImpl>(*impl_);
  v->offset = impl_->offset + offset;
  v->shape = shape;
  v->requires_grad = false;
  v->grad.reset();
  v->grad_fn.reset();
  v->grad_hook = nullptr;
  return Tensor(std::move(v));
}

Tensor Tensor::detach() const { return reshape(shape()); }

Tensor Tensor::to(Device device) const {
  Tensor out = empty(shape(), dtype(), device);
  copy_bytes(out.raw_data(), device, raw_data(), this->device(), nbytes());
  return out;
}

Tensor Tensor::to(DType dtype) const {
  Tensor out = empty(shape(), dtype, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::clone() const { return to(device()); }

void Tensor::copy_(const Tensor& src) const {
  FTCC_CHECK(src.numel() == numel()) << "copy_: " << src.numel() << " elements into " << numel();
  if (src.dtype() == dtype()) {
    copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
    return;
  }
  // Conversion goes through the host: it is used for checkpoints and tests, never per step. On
  // the CPU it converts straight into this tensor.
  Tensor host = src.device() == Device::CPU ? src : src.to(Device::CPU);
  Tensor conv = device() == Device::CPU ? *this : empty(shape(), dtype(), Device::CPU);
  const std::int64_t n = numel();  // numel() multiplies the shape out: not once per element
  if (dtype() == DType::f32) {
    const double* s = host.data_as<double>();
    float* d = conv.data_as<float>();
    for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
  } else {
    const float* s = host.data_as<float>();
    double* d = conv.data_as<double>();
    for (std::int64_t i = 0; i < n; ++i) d[i] = s[i];
  }
  if (device() != Device::CPU) copy_bytes(raw_data(), device(), conv.raw_data(), Device::CPU, nbytes());
}

void Tensor::fill_(double value) const { kern::fill(*this, value); }

namespace {
// The values of t as a host vector of T, converted element by element: no intermediate tensor
// (a CPU tensor is read in place; a device tensor is copied to the host once).
template <class T>
std::vector<T> host_values(const Tensor& t) {
  const Tensor h = t.device() == Device::CPU ? t : t.to(Device::CPU);
  const auto n = static_cast<std::size_t>(h.numel());
  if (h.dtype() == DType::f32) return std::vector<T>(h.data_as<float>(), h.data_as<float>() + n);
  return std::vector<T>(h.data_as<double>(), h.data_as<double>() + n);
}
}  // namespace

std::vector<float> Tensor::to_vector() const { return host_values<float>(*this); }

std::vector<double> Tensor::to_vector_f64() const { return host_values<double>(*this); }

double Tensor::item() const {
  FTCC_CHECK(numel() == 1) << "item() of a tensor with " << numel() << " elements";
  return to_vector_f64()[0];
}

bool Tensor::requires_grad() const { return impl_ != nullptr && impl_->requires_grad; }

const Tensor& Tensor::requires_grad_(bool on) const {
  check_defined("requires_grad_()");
  FTCC_CHECK(is_leaf() || on) << "requires_grad_(false) on a non-leaf; use detach()";
  impl_->requires_grad = on;
  if (on && is_leaf() && !impl_->grad) impl_->grad = zeros(shape(), dtype(), device()).impl_ptr();
  return *this;
}

bool Tensor::is_leaf() const { return impl_ != nullptr && impl_->grad_fn == nullptr; }

Tensor Tensor::grad() const { return impl_ && impl_->grad ? Tensor(impl_->grad) : Tensor(); }

void Tensor::zero_grad() const {
  if (impl_ && impl_->grad) kern::fill(Tensor(impl_->grad), 0.0);
}

void Tensor::set_grad_buffer(const Tensor& buffer) const {
  check_defined("set_grad_buffer()");
  FTCC_CHECK(is_leaf() && impl_->grad) << "set_grad_buffer on a tensor that is not a leaf requiring grad";
  FTCC_CHECK(buffer.shape() == shape() && buffer.dtype() == dtype() && buffer.device() == device())
      << "set_grad_buffer: buffer " << shape_str(buffer.shape()) << " " << dtype_name(buffer.dtype()) << " for a "
      << shape_str(shape()) << " " << dtype_name(dtype()) << " tensor (or another device)";
  buffer.copy_(Tensor(impl_->grad));
  impl_->grad = buffer.impl_ptr();
}

void Tensor::set_grad_hook(std::function<void()> hook) const {
  check_defined("set_grad_hook()");
  FTCC_CHECK(is_leaf() && impl_->grad) << "set_grad_hook on a tensor that is not a leaf requiring grad";
  impl_->grad_hook = std::move(hook);
}

void Tensor::backward() const {
  check_defined("backward()");
  FTCC_CHECK(numel() == 1) << "backward() needs a one-element tensor (a loss), got shape " << shape_str(shape());
  FTCC_CHECK(requires_grad()) << "backward() on a tensor that does not require grad (no parameter in its graph?)";
  run_backward(*this, full(shape(), 1.0, dtype(), device()));
}

}  // namespace ftcc::tensor
