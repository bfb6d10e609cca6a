// The backward pass: runs the graph under `root` in dependency order, accumulating into leaves.
#pragma once

#include "core/tensor.h"

namespace stoke::autograd {

// Same as root.backward(gradient, retain_graph). `gradient` defaults to 1 for a one-element root.
void backward(const Tensor& root, const Tensor& gradient = Tensor(), bool retain_graph = false);

// Gradients of `outputs` w.r.t. `inputs` without touching .grad() (torch.autograd.grad).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

}  // namespace stoke::autograd
