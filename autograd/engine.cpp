#include "autograd/engine.h"

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "autograd/function.h"
#include "autograd/node.h"
#include "core/grad_mode.h"
#include "core/profiler.h"
#include "core/strided.h"
#include "ops/creation.h"

namespace stoke::autograd {

namespace {

Tensor zeros_for(const OutputInfo& info) {
  // zeros() fills on the tensor's device: the host never writes device memory.
  return zeros(info.shape, {.dtype = info.dtype, .device = info.device});
}

struct Capture {
  Node* node;
  uint32_t output_nr;
};

// Runs the graph below `roots`. With `captures`, gradients reaching those (node, output) pairs
// are returned instead of being accumulated into leaves (autograd::grad).
std::vector<Tensor> run(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads,
                        bool retain_graph, const std::vector<Capture>* captures) {
  NoGradGuard no_grad;  // backward functions compute plain tensors (no double backward yet)
  std::vector<std::shared_ptr<Node>> root_nodes;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;

  // Seed the root gradients.
  for (size_t i = 0; i < roots.size(); ++i) {
    const Edge e = gradient_edge(roots[i]);
    STOKE_CHECK(e.node != nullptr, "backward", "tensor ", i,
                " does not require grad and has no grad_fn");
    auto& buf = buffers[e.node.get()];
    buf.resize(e.node->outputs.size());
    buf[e.input_nr] =
        buf[e.input_nr].defined() ? add_gradients(buf[e.input_nr], root_grads[i]) : root_grads[i];
    root_nodes.push_back(e.node);
  }

  // Count, for every reachable node, how many edges point at it.
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& n : root_nodes)
    if (seen.insert(n.get()).second) stack.push_back(n.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  std::vector<Tensor> captured(captures ? captures->size() : 0);
  std::vector<std::shared_ptr<Node>> ready;
  std::unordered_set<Node*> queued;
  for (auto& n : root_nodes)
    if (dependencies[n.get()] == 0 && queued.insert(n.get()).second) ready.push_back(n);
  std::vector<std::shared_ptr<Node>> executed;

  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    std::vector<Tensor> grads = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    grads.resize(node->outputs.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) grads[i] = zeros_for(node->outputs[i]);
      if (i < node->output_hooks.size())
        for (const auto& hook : node->output_hooks[i]) {
          Tensor replaced = hook(grads[i]);
          if (replaced.defined()) grads[i] = replaced;
        }
    }
    bool skip = false;
    if (captures) {
      for (size_t c = 0; c < captures->size(); ++c)
        if ((*captures)[c].node == node.get()) captured[c] = grads[(*captures)[c].output_nr];
      skip = dynamic_cast<AccumulateGrad*>(node.get()) != nullptr;
    }
    std::vector<Tensor> input_grads;
    if (!skip) {
      std::optional<profiler::Range> range;  // the node's name is built only while profiling
      if (profiler::enabled()) range.emplace(node->name(), profiler::Category::backward);
      input_grads = node->apply(std::move(grads));
    }
    executed.push_back(node);
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.node) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        const OutputInfo& expect = e.node->outputs[e.input_nr];
        const Tensor& g = input_grads[i];
        STOKE_CHECK(g.shape() == expect.shape && g.dtype() == expect.dtype, "backward",
                    node->name(), " returned a gradient of ", g.dtype(), " ", g.shape(),
                    " for input ", i, ", which is ", expect.dtype, " ", expect.shape);
        auto& buf = buffers[e.node.get()];
        buf.resize(e.node->outputs.size());
        buf[e.input_nr] = buf[e.input_nr].defined() ? add_gradients(buf[e.input_nr], g) : g;
      }
      if (--dependencies[e.node.get()] == 0 && queued.insert(e.node.get()).second)
        ready.push_back(e.node);
    }
  }
  if (!retain_graph)
    for (auto& n : executed) n->release_saved();
  return captured;
}

Tensor default_root_grad(const Tensor& root, const Tensor& gradient) {
  if (gradient.defined()) {
    STOKE_CHECK(gradient.shape() == root.shape() && gradient.dtype() == root.dtype(), "backward",
                "gradient of ", gradient.dtype(), " ", gradient.shape(),
                " does not match the tensor's ", root.dtype(), " ", root.shape());
    return gradient.detach();
  }
  STOKE_CHECK(root.numel() == 1, "backward",
              "grad can be implicitly created only for one-element outputs, got shape ",
              root.shape(), "; pass a gradient");
  // ones() fills on the root's device (through its kernels when it is not the CPU).
  Tensor one = ones(root.shape(), {.dtype = root.dtype(), .device = root.device()});
  return one;
}

}  // namespace

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  STOKE_CHECK(root.requires_grad(), "backward",
              "the tensor does not require grad and has no grad_fn");
  run({root}, {default_root_grad(root, gradient)}, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  STOKE_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "grad", "expected ",
              outputs.size(), " grad_outputs, got ", grad_outputs.size());
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < outputs.size(); ++i)
    root_grads.push_back(
        default_root_grad(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i]));
  std::vector<Capture> captures;
  std::vector<std::shared_ptr<Node>> hold;
  for (size_t i = 0; i < inputs.size(); ++i) {
    STOKE_CHECK(inputs[i].requires_grad(), "grad", "input ", i, " does not require grad");
    Edge e = gradient_edge(inputs[i]);
    hold.push_back(e.node);
    captures.push_back({e.node.get(), e.input_nr});
  }
  return run(outputs, root_grads, retain_graph, &captures);
}

}  // namespace stoke::autograd
