#include "ftcc/tensor/kernels.hpp"

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/cuda/backend.hpp"
#include "ftcc/tensor/kernels_cpu.hpp"

namespace ftcc::tensor::kern {

namespace {

void same_place(const Tensor& a, const Tensor& b, const char* op) {
  FTCC_CHECK(a.dtype() == b.dtype()) << op << ": dtypes differ: " << dtype_name(a.dtype()) << " vs "
                                     << dtype_name(b.dtype());
  FTCC_CHECK(a.device() == b.device()) << op << ": devices differ: " << device_name(a.device()) << " vs "
                                       << device_name(b.device());
}

// Calls f.template operator()<T>(cu) with T the element type of t and cu the CUDA kernels for T
// when t is on a CUDA device (nullptr on the CPU). Without a CUDA backend, cuda::backend() throws.
template <class F>
void dispatch(const Tensor& t, F&& f) {
  const bool on_cuda = t.device() == Device::CUDA;
  if (t.dtype() == DType::f32) f.template operator()<float>(on_cuda ? &cuda::backend().kernels<float>() : nullptr);
  else f.template operator()<double>(on_cuda ? &cuda::backend().kernels<double>() : nullptr);
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, const Tensor* bias,
          bool accumulate) {
  same_place(a, b, "gemm");
  same_place(a, c, "gemm");
  FTCC_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2) << "gemm: 2-D operands expected";
  std::int64_t m = trans_a ? a.size(1) : a.size(0), k = trans_a ? a.size(0) : a.size(1);
  std::int64_t kb = trans_b ? b.size(1) : b.size(0), n = trans_b ? b.size(0) : b.size(1);
  FTCC_CHECK(k == kb) << "gemm: inner dimensions differ: " << k << " vs " << kb;
  FTCC_CHECK(c.size(0) == m && c.size(1) == n) << "gemm: output is " << shape_str(c.shape()) << ", expected [" << m
                                                << ", " << n << "]";
  if (bias != nullptr) {
    same_place(a, *bias, "gemm bias");
    FTCC_CHECK(bias->numel() == n) << "gemm: bias has " << bias->numel() << " elements, expected " << n;
  }
  dispatch(a, [&]<class T>(const cuda::KernelTable<T>* cu) {
    const T* bp = bias ? bias->data_as<T>() : nullptr;
    if (cu) cu->gemm(trans_a, trans_b, m, n, k, a.data_as<T>(), b.data_as<T>(), c.data_as<T>(), bp, accumulate);
    else cpu::gemm<T>(trans_a, trans_b, m, n, k, a.data_as<T>(), b.data_as<T>(), c.data_as<T>(), bp, accumulate);
  });
}

void binary(Binary op, const Tensor& a, const Tensor& b, const Tensor& out) {
  same_place(a, b, "binary op");
  same_place(a, out, "binary op");
  FTCC_CHECK(a.numel() == b.numel() && a.numel() == out.numel()) << "binary op: sizes differ";
  int o = static_cast<int>(op);
  dispatch(a, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->binary(o, a.numel(), a.data_as<T>(), b.data_as<T>(), out.data_as<T>());
    else cpu::binary<T>(o, a.numel(), a.data_as<T>(), b.data_as<T>(), out.data_as<T>());
  });
}

void add_rowvec(const Tensor& a, const Tensor& v, const Tensor& out) {
  same_place(a, v, "add_rowvec");
  std::int64_t cols = v.numel();
  std::int64_t rows = cols == 0 ? 0 : a.numel() / cols;
  dispatch(a, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->add_rowvec(rows, cols, a.data_as<T>(), v.data_as<T>(), out.data_as<T>());
    else cpu::add_rowvec<T>(rows, cols, a.data_as<T>(), v.data_as<T>(), out.data_as<T>());
  });
}

void colsum(const Tensor& x, const Tensor& out, bool accumulate) {
  same_place(x, out, "colsum");
  std::int64_t cols = out.numel();
  std::int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  dispatch(x, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->colsum(rows, cols, x.data_as<T>(), out.data_as<T>(), accumulate);
    else cpu::colsum<T>(rows, cols, x.data_as<T>(), out.data_as<T>(), accumulate);
  });
}

void axpy(double alpha, const Tensor& x, const Tensor& y) {
  same_place(x, y, "axpy");
  FTCC_CHECK(x.numel() == y.numel()) << "axpy: sizes differ: " << x.numel() << " vs " << y.numel();
  dispatch(x, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->axpy(x.numel(), T(alpha), x.data_as<T>(), y.data_as<T>());
    else cpu::axpy<T>(x.numel(), T(alpha), x.data_as<T>(), y.data_as<T>());
  });
}

void scale_copy(double alpha, const Tensor& x, const Tensor& out) {
  same_place(x, out, "scale_copy");
  FTCC_CHECK(x.numel() == out.numel()) << "scale_copy: sizes differ";
  dispatch(x, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->scale_copy(x.numel(), T(alpha), x.data_as<T>(), out.data_as<T>());
    else cpu::scale_copy<T>(x.numel(), T(alpha), x.data_as<T>(), out.data_as<T>());
  });
}

void unary_forward(Unary op, const Tensor& x, const Tensor& y) {
  same_place(x, y, "activation");
  int o = static_cast<int>(op);
  dispatch(x, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->unary_forward(o, x.numel(), x.data_as<T>(), y.data_as<T>());
    else cpu::unary_forward<T>(o, x.numel(), x.data_as<T>(), y.data_as<T>());
  });
}

void bias_unary(const Tensor& y, const Tensor* bias, const Unary* op) {
  FTCC_CHECK(y.dim() == 2) << "bias_unary: 2-D output expected";
  const std::int64_t rows = y.size(0), cols = y.size(1);
  if (bias != nullptr) {
    same_place(y, *bias, "bias_unary");
    FTCC_CHECK(bias->numel() == cols) << "bias_unary: bias has " << bias->numel() << " elements, expected " << cols;
  }
  const int o = op != nullptr ? static_cast<int>(*op) : -1;
  dispatch(y, [&]<class T>(const cuda::KernelTable<T>* cu) {
    T* p = y.data_as<T>();
    const T* bp = bias != nullptr ? bias->data_as<T>() : nullptr;
    if (cu == nullptr) {
      cpu::bias_unary<T>(o, rows, cols, p, bp);
      return;
    }
    if (bp != nullptr) cu->add_rowvec(rows, cols, p, bp, p);  // elementwise: in place is safe
    if (o >= 0) cu->unary_forward(o, rows * cols, p, p);
  });
}

void unary_backward(Unary op, const Tensor& y, const Tensor& gy, const Tensor& gx) {
  same_place(y, gy, "activation backward");
  int o = static_cast<int>(op);
  dispatch(y, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->unary_backward(o, y.numel(), y.data_as<T>(), gy.data_as<T>(), gx.data_as<T>());
    else cpu::unary_backward<T>(o, y.numel(), y.data_as<T>(), gy.data_as<T>(), gx.data_as<T>());
  });
}

void sum_all(const Tensor& x, const Tensor& out) {
  same_place(x, out, "sum");
  dispatch(x, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->sum_all(x.numel(), x.data_as<T>(), out.data_as<T>());
    else *out.data_as<T>() = cpu::sum_all<T>(x.numel(), x.data_as<T>());
  });
}

// CPU broadcast of a (host) scalar; the CUDA path reads the scalar on the device.
template <class T>
static void fill_host(std::int64_t n, T v, T* o) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = v;
}

void fill_from_scalar(const Tensor& s, double scale, const Tensor& out) {
  same_place(s, out, "fill_from_scalar");
  dispatch(out, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->fill_from_scalar(out.numel(), s.data_as<T>(), T(scale), out.data_as<T>());
    else fill_host<T>(out.numel(), T(scale) * *s.data_as<T>(), out.data_as<T>());
  });
}

void fill(const Tensor& out, double value) {
  dispatch(out, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->fill(out.numel(), T(value), out.data_as<T>());
    else fill_host<T>(out.numel(), T(value), out.data_as<T>());
  });
}

void mse_forward(const Tensor& pred, const Tensor& target, const Tensor& out) {
  same_place(pred, target, "mse_loss");
  dispatch(pred, [&]<class T>(const cuda::KernelTable<T>* cu) {
    if (cu) cu->mse_forward(pred.numel(), pred.data_as<T>(), target.data_as<T>(), out.data_as<T>());
    else *out.data_as<T>() = cpu::mse_forward<T>(pred.numel(), pred.data_as<T>(), target.data_as<T>());
  });
}

void mse_backward(const Tensor& pred, const Tensor& target, const Tensor& grad_out, const Tensor& grad_pred) {
  same_place(pred, target, "mse_loss backward");
  dispatch(pred, [&]<class T>(const cuda::KernelTable<T>* cu) {
    const T *p = pred.data_as<T>(), *t = target.data_as<T>(), *g = grad_out.data_as<T>();
    if (cu) cu->mse_backward(pred.numel(), p, t, g, grad_pred.data_as<T>());
    else cpu::mse_backward<T>(pred.numel(), p, t, *g, grad_pred.data_as<T>());
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& target, double scale, const Tensor& lse,
                           const Tensor& out) {
  same_place(logits, target, "cross_entropy_loss");
  const std::int64_t rows = logits.size(0), cols = logits.size(1);
  dispatch(logits, [&]<class T>(const cuda::KernelTable<T>* cu) {
    const T *x = logits.data_as<T>(), *t = target.data_as<T>();
    if (cu) cu->cross_entropy_forward(rows, cols, x, t, T(scale), lse.data_as<T>(), out.data_as<T>());
    else *out.data_as<T>() = T(scale) * cpu::cross_entropy_forward<T>(rows, cols, x, t, lse.data_as<T>());
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& grad_out,
                            double scale, const Tensor& grad_logits) {
  same_place(logits, target, "cross_entropy_loss backward");
  const std::int64_t rows = logits.size(0), cols = logits.size(1);
  dispatch(logits, [&]<class T>(const cuda::KernelTable<T>* cu) {
    const T *x = logits.data_as<T>(), *t = target.data_as<T>(), *l = lse.data_as<T>(), *g = grad_out.data_as<T>();
    if (cu) cu->cross_entropy_backward(rows, cols, x, t, l, g, T(scale), grad_logits.data_as<T>());
    else cpu::cross_entropy_backward<T>(rows, cols, x, t, l, T(scale) * *g, grad_logits.data_as<T>());
  });
}

}  // namespace ftcc::tensor::kern
