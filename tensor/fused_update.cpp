#include "ftcc/tensor/fused_update.hpp"

#include <cmath>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/cuda/backend.hpp"

namespace ftcc::tensor {

namespace {
void check(const Tensor& p, const Tensor& other, const char* what) {
  FTCC_CHECK(other.defined()) << "optimizer update: " << what << " is undefined";
  FTCC_CHECK(p.dtype() == DType::f32 && other.dtype() == DType::f32) << "optimizer update: float32 only (" << what << ")";
  FTCC_CHECK(p.device() == other.device()) << "optimizer update: " << what << " is on another device";
  FTCC_CHECK(p.numel() == other.numel()) << "optimizer update: " << what << " has " << other.numel()
                                         << " elements, parameter has " << p.numel();
}
}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdUpdate& u) {
  check(param, grad, "gradient");
  // One flag for the three tests below (the analyzer cannot tell that three float compares agree).
  const bool use_momentum = u.momentum != 0.0f;
  if (use_momentum) check(param, momentum_buf, "momentum buffer");
  const std::int64_t n = param.numel();
  float* p = param.data();
  const float* g = grad.data();
  float* buf = use_momentum ? momentum_buf.data() : nullptr;
  if (param.device() == Device::CUDA) {
    cuda::backend().sgd_step(n, p, g, buf, u.lr, u.momentum, u.dampening, u.weight_decay, u.nesterov, u.first_step);
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if (u.weight_decay != 0.0f) d += u.weight_decay * p[i];
    if (use_momentum) {
      float b = u.first_step ? d : u.momentum * buf[i] + (1.0f - u.dampening) * d;
      buf[i] = b;
      d = u.nesterov ? d + u.momentum * b : b;
    }
    p[i] -= u.lr * d;
  }
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m_t, const Tensor& v_t, const AdamUpdate& u) {
  check(param, grad, "gradient");
  check(param, m_t, "exp_avg");
  check(param, v_t, "exp_avg_sq");
  const std::int64_t n = param.numel();
  float *p = param.data(), *m = m_t.data(), *v = v_t.data();
  const float* g = grad.data();
  if (param.device() == Device::CUDA) {
    cuda::backend().adam_step(n, p, g, m, v, u.lr, u.beta1, u.beta2, u.eps, u.weight_decay, u.decoupled,
                              u.bias_correction1, u.bias_correction2, u.one_minus_beta1, u.one_minus_beta2);
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    float pi = p[i], gi = g[i];
    if (u.weight_decay != 0.0f) {
      if (u.decoupled) pi *= 1.0f - u.lr * u.weight_decay;
      else gi += u.weight_decay * pi;
    }
    float mi = u.beta1 * m[i] + u.one_minus_beta1 * gi;
    float vi = u.beta2 * v[i] + u.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi / u.bias_correction2) + u.eps;
    p[i] = pi - u.lr * (mi / u.bias_correction1) / denom;
  }
}

}  // namespace ftcc::tensor
