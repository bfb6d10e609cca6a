#include "autograd/conv2d.h"

#include "autograd/autocast.h"
#include "autograd/function.h"

namespace stoke {

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options) {
  STOKE_AUTOCAST("conv2d", conv2d, input, weight, bias, options);
  Tensor out = ops::conv2d(input, weight, bias, options);
  if (autograd::any_requires_grad({input, weight, bias})) {
    autograd::record("Conv2dBackward", {input, weight, bias}, {out},
                     [x = input.detach(), w = weight.detach(), options](
                         const autograd::GradList& g, const autograd::NeedList& needs) {
                       ops::Conv2dGrads r = ops::conv2d_backward(
                           g[0], x, w, options, needs[0], needs[1], needs.size() > 2 && needs[2]);
                       return autograd::GradList{r.grad_input, r.grad_weight, r.grad_bias};
                     });
  }
  return out;
}

}  // namespace stoke
