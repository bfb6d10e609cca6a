// How differentiable functions record themselves. A function computes its outputs with ops/
// kernels and then, if any input requires grad, calls record() with a backward lambda, named
// as torch names its grad_fn (without the version suffix):
//
//   Tensor y = ops::relu(x);
//   if (autograd::any_requires_grad({x}))
//     autograd::record("ReluBackward", {x}, {y}, [x = x.detach()](const GradList& g, const
//     NeedList&) {
//       return GradList{ops::relu_backward(g[0], x)};
//     });
//
// Rules: capture inputs and outputs detached (t.detach()) so the graph holds no cycle; return one
// gradient per input, of that input's shape and dtype (undefined when needs[i] is false).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/node.h"

namespace stoke::autograd {

using GradList = std::vector<Tensor>;
using NeedList = std::vector<bool>;
using BackwardFn = std::function<GradList(const GradList& grad_outputs, const NeedList& needs)>;

// True when grad mode is on and some defined input requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Defined beside the view/copy backward (view_grad.cpp); referring to it links that file in, which
// registers autograd with core.
extern const bool autograd_hooks_registered;

// Makes `outputs` the results of a node named `name` over `inputs` (undefined inputs allowed).
// Does nothing when no input requires grad or grad mode is off.
void record(const std::string& name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardFn backward);

/// t.detach(), or an undefined tensor where t is undefined (an op's optional inputs).
inline Tensor detached(const Tensor& t) {
  return t.defined() ? t.detach() : Tensor();
}

}  // namespace stoke::autograd
