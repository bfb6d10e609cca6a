#include "autograd/dropout.h"

#include "autograd/elementwise.h"
#include "autograd/function.h"
#include "ops/creation.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  // Identity (!training or p == 0) and the no-graph case need no mask kept alive.
  if (!training || p == 0 || !autograd::any_requires_grad({input}))
    return ops::dropout(input, p, training, generator);
  if (p == 1) {
    // Everything dropped: zeros, still connected to the graph (with a zero gradient).
    Tensor output = ops::dropout(input, p, training, generator);
    autograd::record("DropoutBackward", {input}, {output},
                     [](const GradList& g, const NeedList&) -> GradList {
                       return {zeros(g[0].shape(), {.dtype = g[0].dtype()})};
                     });
    return output;
  }
  auto [output, mask] = ops::dropout_with_mask(input, p, generator);
  autograd::record("DropoutBackward", {input}, {output},
                   [mask = mask, p](const GradList& g, const NeedList&) -> GradList {
                     return {ops::dropout_backward(g[0], mask, p)};
                   });
  return output;
}

Tensor drop_path(const Tensor& input, double p, bool training, Generator* generator) {
  const char* op = "drop_path";
  const Shape shape = ops::drop_path_noise_shape(op, input, p);
  if (!training || p == 0) return input;
  return mul(input, ops::dropout_noise(input, shape, p, generator));
}

Tensor dropout2d(const Tensor& input, double p, bool training, Generator* generator) {
  const char* op = "dropout2d";
  const Shape shape = ops::dropout2d_noise_shape(op, input, p);
  if (!training || p == 0) return input;
  return mul(input, ops::dropout_noise(input, shape, p, generator));
}

}  // namespace stoke
