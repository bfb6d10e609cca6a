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

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dOptions& options) {
  STOKE_AUTOCAST("conv_transpose2d", conv_transpose2d, input, weight, bias, options);
  Tensor out = ops::conv_transpose2d(input, weight, bias, options);
  if (autograd::any_requires_grad({input, weight, bias})) {
    autograd::record(
        "ConvTranspose2dBackward", {input, weight, bias}, {out},
        [x = input.detach(), w = weight.detach(), conv = ops::conv_transpose2d_as_conv(options)](
            const autograd::GradList& g, const autograd::NeedList& needs) {
          autograd::GradList out(3);
          // y = conv2d's input gradient at x, so x's gradient is conv2d of y's gradient, and the
          // weight's is conv2d's weight gradient with the roles of input and grad_out swapped.
          if (needs[0]) out[0] = ops::conv2d(g[0], w, Tensor(), conv);
          if (needs[1]) out[1] = ops::conv2d_backward_weight(x, g[0], w, conv);
          if (needs.size() > 2 && needs[2]) out[2] = ops::conv2d_backward_bias(g[0]);
          return out;
        });
  }
  return out;
}

}  // namespace stoke
