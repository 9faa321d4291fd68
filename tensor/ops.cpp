#include "ftcc/tensor/ops.hpp"

#include <optional>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/autograd.hpp"
#include "ftcc/tensor/kernels.hpp"

namespace ftcc::tensor {

namespace {

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  FTCC_CHECK(a.defined() && b.defined()) << op << ": undefined operand";
  FTCC_CHECK(a.dtype() == b.dtype()) << op << ": dtypes differ: " << dtype_name(a.dtype()) << " vs "
                                     << dtype_name(b.dtype());
  FTCC_CHECK(a.device() == b.device()) << op << ": devices differ: " << device_name(a.device()) << " vs "
                                       << device_name(b.device());
}

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
Tensor scalar_like(const Tensor& t) { return Tensor::empty({1}, t.dtype(), t.device()); }

// A 2-D view of a 1-D bias as a row vector, for GEMM shapes.
bool is_row_broadcast(const Tensor& a, const Tensor& b) {
  return b.dim() == 1 && a.dim() >= 1 && a.shape().back() == b.size(0) && a.shape() != b.shape();
}

// GEMM-shaped gradients of a leaf (a parameter) are accumulated by the GEMM itself into the
// leaf's grad buffer (beta = 1): no temporary, no extra pass to add it. The engine adds whatever a
// node returns, so returning an undefined tensor for such an input keeps the usual semantics.
bool accumulates_in_place(const Tensor& in) { return in.is_leaf() && in.grad().defined(); }

// Runs gemm into the leaf's gradient (accumulating) or into a new tensor that is returned.
Tensor gemm_grad(const Tensor& in, const Tensor& a, bool ta, const Tensor& b, bool tb) {
  if (accumulates_in_place(in)) {
    kern::gemm(a, ta, b, tb, in.grad(), nullptr, true);
    return Tensor();
  }
  Tensor g = like(in);
  kern::gemm(a, ta, b, tb, g, nullptr, false);
  return g;
}

class MatmulNode : public Node {
 public:
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor &a = inputs[0], &b = inputs[1];
    Tensor ga, gb;
    if (a.requires_grad()) ga = gemm_grad(a, g, false, b, true);  // dA = dC B^T
    if (b.requires_grad()) gb = gemm_grad(b, a, true, g, false);  // dB = A^T dC
    return {ga, gb};
  }
  const char* name() const override { return "matmul"; }
};

class AddNode : public Node {
 public:
  explicit AddNode(bool broadcast) : broadcast_(broadcast) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gb;
    if (inputs[1].requires_grad()) {
      if (broadcast_) {
        gb = like(inputs[1]);
        kern::colsum(g, gb, false);
      } else {
        gb = g;
      }
    }
    return {g, gb};
  }
  const char* name() const override { return "add"; }

 private:
  bool broadcast_;
};

class SubNode : public Node {
 public:
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gb;
    if (inputs[1].requires_grad()) {
      gb = like(g);
      kern::scale_copy(-1.0, g, gb);
    }
    return {g, gb};
  }
  const char* name() const override { return "sub"; }
};

class MulNode : public Node {
 public:
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor ga, gb;
    if (inputs[0].requires_grad()) {
      ga = like(g);
      kern::binary(kern::Binary::Mul, g, inputs[1], ga);
    }
    if (inputs[1].requires_grad()) {
      gb = like(g);
      kern::binary(kern::Binary::Mul, g, inputs[0], gb);
    }
    return {ga, gb};
  }
  const char* name() const override { return "mul"; }
};

class SumNode : public Node {
 public:
  explicit SumNode(double scale) : scale_(scale) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = like(inputs[0]);
    kern::fill_from_scalar(g, scale_, gx);
    return {gx};
  }
  const char* name() const override { return scale_ == 1.0 ? "sum" : "mean"; }

 private:
  double scale_;
};

class UnaryNode : public Node {
 public:
  UnaryNode(kern::Unary op, Tensor out) : op_(op), out_(std::move(out)) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = like(g);
    kern::unary_backward(op_, out_, g, gx);
    return {gx};
  }
  const char* name() const override { return "activation"; }

 private:
  kern::Unary op_;
  Tensor out_;  // detached: the node must not own the tensor that owns it
};

// The gradients of y = x W^T + b given dY, shared by the plain and the activated linear.
std::vector<Tensor> linear_backward(const std::vector<Tensor>& inputs, const Tensor& g) {
  const Tensor &x = inputs[0], &w = inputs[1];
  Tensor gx, gw, gb;
  if (x.requires_grad()) gx = gemm_grad(x, g, false, w, false);  // dX[b,in] = dY[b,out] W[out,in]
  if (w.requires_grad()) gw = gemm_grad(w, g, true, x, false);   // dW[out,in] = dY^T X
  if (inputs.size() > 2 && inputs[2].requires_grad()) {          // db = column sums of dY
    const Tensor& b = inputs[2];
    if (accumulates_in_place(b)) {
      kern::colsum(g, b.grad(), true);
    } else {
      gb = like(b);
      kern::colsum(g, gb, false);
    }
  }
  if (inputs.size() > 2) return {gx, gw, gb};
  return {gx, gw};
}

class LinearNode : public Node {
 public:
  std::vector<Tensor> backward(const Tensor& g) override { return linear_backward(inputs, g); }
  const char* name() const override { return "linear"; }
};

// y = f(x W^T + b): dZ = dY f'(z), from the saved output (as UnaryNode), then the linear's gradients.
class LinearActivationNode : public Node {
 public:
  LinearActivationNode(kern::Unary op, Tensor out) : op_(op), out_(std::move(out)) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gz = like(g);
    kern::unary_backward(op_, out_, g, gz);
    return linear_backward(inputs, gz);
  }
  const char* name() const override { return "linear_activation"; }

 private:
  kern::Unary op_;
  Tensor out_;  // detached: the node must not own the tensor that owns it
};

class MseNode : public Node {
 public:
  explicit MseNode(double scale) : scale_(scale) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gp = like(inputs[0]);
    Tensor gs = g;
    if (scale_ != 1.0) {
      gs = like(g);
      kern::scale_copy(scale_, g, gs);
    }
    kern::mse_backward(inputs[0], inputs[1], gs, gp);
    return {gp, Tensor()};
  }
  const char* name() const override { return "mse_loss"; }

 private:
  double scale_;  // numel / denominator: the kernels compute means
};

class CrossEntropyNode : public Node {
 public:
  CrossEntropyNode(double scale, Tensor lse) : scale_(scale), lse_(std::move(lse)) {}
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = like(inputs[0]);
    kern::cross_entropy_backward(inputs[0], inputs[1], lse_, g, scale_, gx);
    return {gx, Tensor()};
  }
  const char* name() const override { return "cross_entropy_loss"; }

 private:
  double scale_;  // 1 / denominator
  Tensor lse_;    // [N, 2]: each row's maximum and log-sum-exp of the shifted logits, from forward
};

// The kernel of an activation; none for identity.
std::optional<kern::Unary> unary_of(Activation act) {
  switch (act) {
    case Activation::relu: return kern::Unary::Relu;
    case Activation::tanh: return kern::Unary::Tanh;
    case Activation::sigmoid: return kern::Unary::Sigmoid;
    case Activation::identity: break;
  }
  return std::nullopt;
}

Tensor unary(kern::Unary op, const Tensor& x) {
  FTCC_CHECK(x.defined()) << "activation of an undefined tensor";
  Tensor y = like(x);
  kern::unary_forward(op, x, y);
  if (needs_grad({&x})) attach(y, std::make_shared<UnaryNode>(op, y.detach()), {x});
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same(a, b, "matmul");
  FTCC_CHECK(a.dim() == 2 && b.dim() == 2) << "matmul: 2-D operands expected, got " << shape_str(a.shape()) << " x "
                                           << shape_str(b.shape());
  FTCC_CHECK(a.size(1) == b.size(0)) << "matmul: " << shape_str(a.shape()) << " x " << shape_str(b.shape());
  Tensor c = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  kern::gemm(a, false, b, false, c, nullptr, false);
  if (needs_grad({&a, &b})) attach(c, std::make_shared<MatmulNode>(), {a, b});
  return c;
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_same(a, b, "add");
  bool bc = is_row_broadcast(a, b);
  FTCC_CHECK(bc || a.shape() == b.shape()) << "add: shapes " << shape_str(a.shape()) << " and "
                                           << shape_str(b.shape()) << " (b must equal a or be a row vector)";
  Tensor out = like(a);
  if (bc) kern::add_rowvec(a, b, out);
  else kern::binary(kern::Binary::Add, a, b, out);
  if (needs_grad({&a, &b})) attach(out, std::make_shared<AddNode>(bc), {a, b});
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  check_same(a, b, "sub");
  FTCC_CHECK(a.shape() == b.shape()) << "sub: shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape());
  Tensor out = like(a);
  kern::binary(kern::Binary::Sub, a, b, out);
  if (needs_grad({&a, &b})) attach(out, std::make_shared<SubNode>(), {a, b});
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  check_same(a, b, "mul");
  FTCC_CHECK(a.shape() == b.shape()) << "mul: shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape());
  Tensor out = like(a);
  kern::binary(kern::Binary::Mul, a, b, out);
  if (needs_grad({&a, &b})) attach(out, std::make_shared<MulNode>(), {a, b});
  return out;
}

Tensor sum(const Tensor& x) {
  Tensor out = scalar_like(x);
  kern::sum_all(x, out);
  if (needs_grad({&x})) attach(out, std::make_shared<SumNode>(1.0), {x});
  return out;
}

Tensor mean(const Tensor& x) {
  FTCC_CHECK(x.numel() > 0) << "mean of an empty tensor";
  Tensor out = scalar_like(x);
  kern::sum_all(x, out);
  kern::scale_copy(1.0 / static_cast<double>(x.numel()), out, out);
  if (needs_grad({&x})) attach(out, std::make_shared<SumNode>(1.0 / static_cast<double>(x.numel())), {x});
  return out;
}

Tensor relu(const Tensor& x) { return unary(kern::Unary::Relu, x); }
Tensor tanh(const Tensor& x) { return unary(kern::Unary::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(kern::Unary::Sigmoid, x); }

Tensor activation(const Tensor& x, Activation act) {
  const auto op = unary_of(act);
  return op ? unary(*op, x) : x;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear(x, weight, bias, Activation::identity);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  check_same(x, weight, "linear");
  FTCC_CHECK(x.dim() == 2 && weight.dim() == 2) << "linear: x " << shape_str(x.shape()) << ", weight "
                                                << shape_str(weight.shape()) << " (expected [batch,in], [out,in])";
  FTCC_CHECK(x.size(1) == weight.size(1)) << "linear: x has " << x.size(1) << " features, weight expects "
                                          << weight.size(1);
  if (bias.defined()) {
    check_same(x, bias, "linear bias");
    FTCC_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0))
        << "linear: bias " << shape_str(bias.shape()) << " for " << weight.size(0) << " outputs";
  }
  Tensor y = Tensor::empty({x.size(0), weight.size(0)}, x.dtype(), x.device());
  const std::optional<kern::Unary> op = unary_of(act);
  if (!op) {
    kern::gemm(x, false, weight, true, y, bias.defined() ? &bias : nullptr, false);
  } else if (x.device() == Device::CPU) {  // the bias joins the activation's pass
    kern::gemm(x, false, weight, true, y, nullptr, false);
    kern::bias_unary(y, bias.defined() ? &bias : nullptr, &*op);
  } else {  // the CUDA GEMM adds the bias in its own epilogue
    kern::gemm(x, false, weight, true, y, bias.defined() ? &bias : nullptr, false);
    kern::bias_unary(y, nullptr, &*op);
  }
  if (needs_grad({&x, &weight, &bias})) {
    std::vector<Tensor> in{x, weight};
    if (bias.defined()) in.push_back(bias);
    if (op) attach(y, std::make_shared<LinearActivationNode>(*op, y.detach()), std::move(in));
    else attach(y, std::make_shared<LinearNode>(), std::move(in));
  }
  return y;
}

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  return mse_loss(pred, target, static_cast<double>(pred.numel()));
}

Tensor mse_loss(const Tensor& pred, const Tensor& target, double denominator) {
  check_same(pred, target, "mse_loss");
  FTCC_CHECK(pred.numel() == target.numel() && pred.numel() > 0)
      << "mse_loss: prediction " << shape_str(pred.shape()) << ", target " << shape_str(target.shape());
  FTCC_CHECK(denominator > 0) << "mse_loss: denominator " << denominator;
  Tensor out = scalar_like(pred);
  kern::mse_forward(pred, target, out);
  double scale = static_cast<double>(pred.numel()) / denominator;
  if (scale != 1.0) kern::scale_copy(scale, out, out);
  if (needs_grad({&pred})) attach(out, std::make_shared<MseNode>(scale), {pred, target.detach()});
  return out;
}

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target) {
  return cross_entropy_loss(logits, target, logits.dim() == 2 ? static_cast<double>(logits.size(0)) : 1.0);
}

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target, double denominator) {
  check_same(logits, target, "cross_entropy_loss");
  FTCC_CHECK(logits.dim() == 2 && logits.size(0) > 0 && logits.size(1) > 0)
      << "cross_entropy_loss: logits must be [rows, classes] with at least one of each, got "
      << shape_str(logits.shape());
  FTCC_CHECK(target.shape() == logits.shape())
      << "cross_entropy_loss: target " << shape_str(target.shape()) << " must have the logits' shape "
      << shape_str(logits.shape()) << " (class probabilities per row; data::one_hot turns class indices into them)";
  FTCC_CHECK(denominator > 0) << "cross_entropy_loss: denominator " << denominator;
  Tensor out = scalar_like(logits);
  Tensor lse = Tensor::empty({logits.size(0), 2}, logits.dtype(), logits.device());
  const double scale = 1.0 / denominator;
  kern::cross_entropy_forward(logits, target, scale, lse, out);
  if (needs_grad({&logits}))
    attach(out, std::make_shared<CrossEntropyNode>(scale, lse), {logits, target.detach()});
  return out;
}

}  // namespace ftcc::tensor
