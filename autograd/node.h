// Graph nodes. Each differentiable op that sees an input requiring grad records one Node: it holds
// what the backward needs and one Edge per input, pointing at the node that produced that input
// (or at the leaf's AccumulateGrad). Saved tensors are stored detached, so the graph has no
// cycles and is freed as soon as the last output and the engine let go of it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace stoke::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;       // which of node's gradient inputs this edge feeds
};

// Enough of an output to build a zero gradient when none flowed into it.
struct OutputInfo {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grads[i] is the gradient of output i (zero-filled if nothing flowed in). Returns one gradient
  // per entry of next_edges (undefined where that input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Drops saved tensors once a backward pass without retain_graph has run.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  std::vector<OutputInfo> outputs;
  // Hooks registered on output i (Tensor::register_hook on a non-leaf), run in order on its
  // gradient before apply; empty, or one list per output.
  std::vector<std::vector<std::function<Tensor(const Tensor&)>>> output_hooks;
};

// The node a leaf's gradients flow into; it sums them into leaf.grad() and fires the leaf's hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

 private:
  Tensor leaf_;  // shares the leaf's TensorImpl
};

// The edge an op's input contributes to the graph: its grad_fn, its AccumulateGrad (created on
// first use), or null.
Edge gradient_edge(const Tensor& t);

// a + b into a new tensor (same shape and dtype): how gradients are accumulated.
Tensor add_gradients(const Tensor& a, const Tensor& b);

}  // namespace stoke::autograd
