// tensor/autograd.hpp: the recorded graph and the reverse pass.
//
// Each differentiable op (tensor/ops.cpp) creates a Node holding what its backward needs (inputs,
// sometimes a detached copy of its output) and attaches it to its output. The output never holds
// itself through its node, so graphs are freed as soon as the last handle to the loss goes.
// To add an op: derive from Node, implement backward() returning one gradient per input (an
// undefined Tensor where an input needs none), and call attach() in the forward function.
#pragma once

#include <memory>
#include <vector>

#include "ftcc/tensor/tensor.hpp"

namespace ftcc::tensor {

class Node {
 public:
  virtual ~Node() = default;
  // Gradients with respect to inputs(), given the gradient of the output. Runs under NoGradGuard.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  virtual const char* name() const = 0;
  std::vector<Tensor> inputs;
};

// Recording is on by default and per thread.
bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Whether an op with these inputs must record a node.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Makes `node` the grad_fn of `out` (with `inputs` saved in it) when any input requires grad.
void attach(const Tensor& out, std::shared_ptr<Node> node, std::vector<Tensor> inputs);

// The reverse pass behind Tensor::backward(): topological order from `root`, gradients summed per
// tensor, leaf gradients added into their grad buffers.
void run_backward(const Tensor& root, const Tensor& seed);

}  // namespace ftcc::tensor
