#include "ftcc/tensor/autograd.hpp"

#include <unordered_map>
#include <unordered_set>

#include "ftcc/base/error.hpp"
#include "ftcc/tensor/kernels.hpp"

namespace ftcc::tensor {

namespace {
thread_local bool g_grad_enabled = true;
}

bool grad_enabled() { return g_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t != nullptr && t->requires_grad()) return true;
  return false;
}

void attach(const Tensor& out, std::shared_ptr<Node> node, std::vector<Tensor> inputs) {
  node->inputs = std::move(inputs);
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = std::move(node);
}

void run_backward(const Tensor& root, const Tensor& seed) {
  // Topological order by an iterative depth-first search (graphs of deep MLPs would overflow a
  // recursive one only at absurd depths, but an explicit stack costs nothing).
  std::vector<TensorImpl*> order;
  std::unordered_set<TensorImpl*> seen;
  std::unordered_map<TensorImpl*, std::shared_ptr<TensorImpl>> keep;  // impls reached via nodes
  struct Frame {
    TensorImpl* t;
    std::size_t next;
  };
  std::vector<Frame> stack{{root.impl(), 0}};
  seen.insert(root.impl());
  while (!stack.empty()) {
    Frame& f = stack.back();
    Node* node = f.t->grad_fn.get();
    if (node != nullptr && f.next < node->inputs.size()) {
      const Tensor& in = node->inputs[f.next++];
      if (in.requires_grad() && seen.insert(in.impl()).second) {
        keep[in.impl()] = in.impl_ptr();
        stack.push_back({in.impl(), 0});
      }
      continue;
    }
    order.push_back(f.t);
    stack.pop_back();
  }

  std::unordered_map<TensorImpl*, Tensor> grads;
  grads[root.impl()] = seed;
  // Leaves with a gradient hook: how many edges of the graph lead to them. Nodes may accumulate a
  // leaf's gradient in place (ops.cpp) or return it; either way the hook runs once the last edge
  // has delivered, never before (an edge of a node off the gradient's path never delivers: no hook).
  std::unordered_map<TensorImpl*, int> remaining;
  for (TensorImpl* t : order)
    if (t->grad_fn)
      for (const Tensor& in : t->grad_fn->inputs)
        if (in.requires_grad() && in.is_leaf() && in.impl()->grad && in.impl()->grad_hook) ++remaining[in.impl()];
  NoGradGuard no_grad;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    TensorImpl* t = *it;
    auto g = grads.find(t);
    if (g == grads.end()) continue;  // not on a path from the root's gradient
    Tensor grad = g->second;
    grads.erase(g);
    if (t->grad_fn == nullptr) {
      if (t->grad) {
        kern::axpy(1.0, grad, Tensor(t->grad));
        if (t->grad_hook && !remaining.count(t)) t->grad_hook();  // the root itself
      }
      continue;
    }
    Node* node = t->grad_fn.get();
    std::vector<Tensor> in_grads = node->backward(grad);
    FTCC_CHECK(in_grads.size() == node->inputs.size()) << node->name() << ": backward returned " << in_grads.size()
                                                       << " gradients for " << node->inputs.size() << " inputs";
    for (std::size_t i = 0; i < in_grads.size(); ++i) {
      const Tensor& in = node->inputs[i];
      if (!in.requires_grad() || !in_grads[i].defined()) continue;
      FTCC_CHECK(in_grads[i].numel() == in.numel())
          << node->name() << ": gradient of input " << i << " has " << in_grads[i].numel() << " elements, expected "
          << in.numel();
      auto [pos, inserted] = grads.try_emplace(in.impl(), in_grads[i]);
      if (!inserted) {
        // Sum into a fresh buffer: the first gradient may alias a tensor owned by a node.
        Tensor sum = pos->second.clone();
        kern::axpy(1.0, in_grads[i], sum);
        pos->second = sum;
      }
    }
    for (const Tensor& in : node->inputs) {
      auto r = remaining.find(in.impl());
      if (r == remaining.end() || --r->second > 0) continue;
      // Every edge to this leaf has delivered: add what was returned, then tell the hook.
      if (auto pending = grads.find(in.impl()); pending != grads.end()) {
        kern::axpy(1.0, pending->second, Tensor(in.impl()->grad));
        grads.erase(pending);
      }
      remaining.erase(r);  // once, even when the node takes this leaf twice
      in.impl()->grad_hook();
    }
  }
}

}  // namespace ftcc::tensor
