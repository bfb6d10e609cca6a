#include "autograd/group_norm.h"

#include "autograd/autocast.h"
#include "autograd/function.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

using autograd::detached;

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  const NormOptions& options) {
  STOKE_AUTOCAST("group_norm", group_norm, input, num_groups, weight, bias, options);
  ops::GroupNormForward f = ops::group_norm_forward(input, num_groups, weight, bias, options);
  if (autograd::any_requires_grad({input, weight, bias}))
    autograd::record(
        "NativeGroupNormBackward", {input, weight, bias}, {f.output},
        [x = input.detach(), w = detached(weight), has_bias = bias.defined(), mean = f.save_mean,
         rstd = f.save_rstd, num_groups](const GradList& g, const NeedList& needs) -> GradList {
          ops::GroupNormGrads r =
              ops::group_norm_backward(g[0], x, num_groups, w, mean, rstd,
                                       {needs[0], needs[1] && w.defined(), needs[2] && has_bias});
          return {r.grad_input, r.grad_weight, r.grad_bias};
        });
  return f.output;
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, const NormOptions& options) {
  STOKE_AUTOCAST("layer_norm", layer_norm, input, normalized_shape, weight, bias, options);
  ops::GroupNormForward f = ops::layer_norm_forward(input, normalized_shape, weight, bias, options);
  if (autograd::any_requires_grad({input, weight, bias}))
    autograd::record("NativeLayerNormBackward", {input, weight, bias}, {f.output},
                     [x = input.detach(), w = detached(weight), has_bias = bias.defined(),
                      mean = f.save_mean, rstd = f.save_rstd,
                      normalized_shape](const GradList& g, const NeedList& needs) -> GradList {
                       ops::GroupNormGrads r = ops::layer_norm_backward(
                           g[0], x, normalized_shape, w, mean, rstd,
                           {needs[0], needs[1] && w.defined(), needs[2] && has_bias});
                       return {r.grad_input, r.grad_weight, r.grad_bias};
                     });
  return f.output;
}

}  // namespace stoke
