// tensor/fused_update.hpp: the elementwise parameter updates behind optim::SGD and optim::Adam,
// one pass over (param, grad, state), on the tensors' device. The CPU loop here is the reference
// for the CUDA kernels in tensor/cuda/optim.cu (same operations in the same order).
//
// SGD (PyTorch semantics):  d = g + wd p;  buf = first ? d : mu buf + (1 - dampening) d;
//                           d = nesterov ? d + mu buf : buf;  p -= lr d
// Adam / AdamW:             Adam adds wd p to g; AdamW multiplies p by (1 - lr wd) first;
//                           m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//                           p -= lr (m / bc1) / (sqrt(v / bc2) + eps),  bc_i = 1 - b_i^t
// float32 only (optimizer state is float32).
#pragma once

#include "ftcc/tensor/tensor.hpp"

namespace ftcc::tensor {

struct SgdUpdate {
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdUpdate& u);

// one_minus_beta1/2 are computed in double by the caller: in float, 1.0f - 0.999f is 1.29e-5
// (relative) too small, which every step's second moment would carry.
struct AdamUpdate {
  float lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  float bias_correction1, bias_correction2;
  float one_minus_beta1, one_minus_beta2;
};
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamUpdate& u);

}  // namespace ftcc::tensor
