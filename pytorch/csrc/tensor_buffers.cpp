#include "tensor_buffers.hpp"

#include "host_block_pool.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace ftcc::torch_backend {

comm::DType dtype_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return comm::DType::f32;
    case at::kDouble: return comm::DType::f64;
    case at::kInt: return comm::DType::i32;
    case at::kLong: return comm::DType::i64;
    case at::kByte: return comm::DType::u8;
    case at::kHalf: return comm::DType::f16;
    case at::kBFloat16: return comm::DType::bf16;
    case at::kChar: return comm::DType::i8;
    case at::kShort: return comm::DType::i16;
    case at::kBool: return comm::DType::boolean;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "ftcc: ", op, ": tensors of dtype ", t.scalar_type(),
                   " are not supported; use float32, float64, bfloat16, float16, int64, int32, int16, int8, uint8 "
                   "or bool");
}

bool is_avg(const c10d::ReduceOp& op) { return op.op_ == c10d::ReduceOp::AVG; }

comm::ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const char* op_name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return comm::ReduceOp::sum;
    case c10d::ReduceOp::PRODUCT: return comm::ReduceOp::prod;
    case c10d::ReduceOp::MIN: return comm::ReduceOp::min;
    case c10d::ReduceOp::MAX: return comm::ReduceOp::max;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "ftcc: ", op_name, ": ReduceOp.AVG of ", t.scalar_type(),
                        " tensors is not defined; use SUM and divide, or a floating-point tensor");
      return comm::ReduceOp::sum;
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "ftcc: ", op_name, ": PREMUL_SUM of ", t.scalar_type(),
                        " tensors is not defined; use a floating-point tensor");
      premul_factor(op);  // checks the factor
      return comm::ReduceOp::sum;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK_VALUE(!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()), "ftcc: ", op_name,
                        ": bitwise reductions (BAND/BOR/BXOR) of ", t.scalar_type(),
                        " tensors are not defined; use an integer or bool tensor");
      return op.op_ == c10d::ReduceOp::BAND ? comm::ReduceOp::band
             : op.op_ == c10d::ReduceOp::BOR ? comm::ReduceOp::bor
                                              : comm::ReduceOp::bxor;
    default: break;
  }
  TORCH_CHECK_VALUE(false, "ftcc: ", op_name, ": this reduction is not supported; ftcc reduces with SUM, AVG, PRODUCT, "
                    "MIN, MAX, PREMUL_SUM, BAND, BOR and BXOR");
}

double premul_factor(const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return 1.0;
  const auto* s = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK_VALUE(s != nullptr, "ftcc: PREMUL_SUM without its factor");
  if (s->tensor_factor.defined()) {
    TORCH_CHECK_VALUE(s->tensor_factor.numel() == 1, "ftcc: PREMUL_SUM with a factor of ", s->tensor_factor.numel(),
                      " elements; ftcc takes one scalar");
    return s->tensor_factor.item<double>();
  }
  return s->double_factor;
}

void sync_current_streams(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (t.defined() && t.device().is_cuda()) {
      c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
      impl.getStream(t.device()).synchronize();
    }
}

void check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK_VALUE(t.defined(), "ftcc: ", op, ": an undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "ftcc: ", op, ": only dense tensors (sparse ones are not supported)");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "ftcc: ", op, ": tensors on ", t.device(),
                    " are not supported (CPU, or CUDA through host staging)");
  dtype_of(t, op);
}

void check_single(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK_VALUE(ts.size() == 1, "ftcc: ", op, ": expected one tensor per call, got ", ts.size(),
                    " (lists of per-device tensors are not supported)");
  check_tensor(ts[0], op);
}

void check_same(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op, const char* what) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    check_tensor(ts[i], op);
    TORCH_CHECK_VALUE(ts[i].scalar_type() == like.scalar_type(), "ftcc: ", op, ": ", what, "[", i, "] is ",
                      ts[i].scalar_type(), " but the input is ", like.scalar_type());
    TORCH_CHECK_VALUE(ts[i].numel() == like.numel(), "ftcc: ", op, ": ", what, "[", i, "] has ", ts[i].numel(),
                      " elements but the input has ", like.numel());
  }
}

bool same_numel(const std::vector<at::Tensor>& ts, const at::Tensor& like) {
  for (const auto& t : ts)
    if (t.numel() != like.numel()) return false;
  return true;
}

std::int64_t bytes_of(const at::Tensor& t) { return static_cast<std::int64_t>(t.numel() * t.element_size()); }

at::Tensor flat_cat(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  for (const auto& t : ts) flat.push_back(host_input(t));
  return flat.empty() ? at::Tensor() : at::cat(flat);
}

void write_split(const std::vector<at::Tensor>& outs, const at::Tensor& flat) {
  std::int64_t at = 0;
  for (const auto& o : outs) {
    write_result(o, flat.narrow(0, at, o.numel()));
    at += o.numel();
  }
}

void write_split_bytes(const std::vector<at::Tensor>& outs, const at::Tensor& bytes) {
  std::int64_t at = 0;
  for (const auto& o : outs) {
    write_result(o, bytes.narrow(0, at, bytes_of(o)).view(o.scalar_type()));
    at += bytes_of(o);
  }
}

at::Tensor host_input(const at::Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return t.reshape({-1});
  return t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous().reshape({-1});
}

void write_result(const at::Tensor& dst, const at::Tensor& flat) {
  if (!flat.defined() || dst.numel() == 0) return;
  if (dst.device().is_cpu() && dst.is_contiguous() && dst.data_ptr() == flat.data_ptr()) return;
  dst.copy_(flat.view(dst.sizes()));
  sync_current_streams({dst});
}

at::Tensor host_empty(const at::Tensor& like, std::int64_t n) { return pooled_host_empty(like.scalar_type(), n); }

HostBuffer::HostBuffer(const at::Tensor& t, bool copy_in) : user(t) {
  if (t.device().is_cpu() && t.is_contiguous()) {
    host = t;
  } else if (copy_in) {
    host = t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
  } else {
    host = at::empty(t.sizes(), t.options().device(at::kCPU));
  }
}

void HostBuffer::copy_back() const {
  if (host.is_same(user)) return;
  user.copy_(host);
  sync_current_streams({user});
}

}  // namespace ftcc::torch_backend
