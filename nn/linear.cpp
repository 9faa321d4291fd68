#include "ftcc/nn/linear.hpp"

#include <cmath>
#include <span>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/ops.hpp"
#include "ftcc/tensor/random.hpp"

namespace ftcc::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, LinearOptions options)
    : in_(in_features), out_(out_features), init_(options.init) {
  FTCC_CHECK(in_features > 0 && out_features > 0) << "Linear(" << in_features << ", " << out_features
                                                  << "): sizes must be positive";
  weight_ = register_parameter("weight", Tensor::zeros({out_, in_}));
  if (options.bias) bias_ = register_parameter("bias", Tensor::zeros({out_}));
  Linear::reset_parameters(options.seed);  // what a constructor calls anyway: no virtual dispatch yet
}

Tensor Linear::forward(const Tensor& x) { return forward(x, tensor::Activation::identity); }

Tensor Linear::forward(const Tensor& x, tensor::Activation act) {
  FTCC_CHECK(x.dim() == 2 && x.size(1) == in_) << "Linear(" << in_ << ", " << out_ << "): input of shape "
                                               << tensor::shape_str(x.shape());
  return tensor::linear(x, weight_, bias_, act);
}

void Linear::reset_parameters(std::uint64_t seed) {
  std::vector<float> w(static_cast<std::size_t>(in_ * out_)), b(static_cast<std::size_t>(out_), 0.0f);
  tensor::Philox wr(seed, 0), br(seed, 1);
  const double fan_in = static_cast<double>(in_), fan_out = static_cast<double>(out_);
  switch (init_) {
    case Init::KaimingUniform: {
      // PyTorch: kaiming_uniform_(a=sqrt(5)) gives bound sqrt(6 / ((1 + 5) fan_in)) = 1/sqrt(fan_in).
      float bound = static_cast<float>(1.0 / std::sqrt(fan_in));
      wr.fill_uniform(w, -bound, bound);
      br.fill_uniform(b, -bound, bound);
      break;
    }
    case Init::XavierUniform: {
      float a = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
      wr.fill_uniform(w, -a, a);
      break;
    }
    case Init::KaimingNormal:
      wr.fill_normal(w, 0.0f, static_cast<float>(std::sqrt(2.0 / fan_in)));
      break;
  }
  weight_.copy_(Tensor::from_vector({out_, in_}, std::span<const float>(w)));
  if (bias_.defined()) bias_.copy_(Tensor::from_vector({out_}, std::span<const float>(b)));
}

}  // namespace ftcc::nn
