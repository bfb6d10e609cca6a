#include "autograd/batch_norm.h"

#include "autograd/autocast.h"
#include "autograd/elementwise_relu_observer.h"
#include "autograd/function.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

using autograd::detached;

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, const BatchNormOptions& options) {
  STOKE_AUTOCAST("batch_norm", batch_norm, input, running_mean, running_var, weight, bias, options);
  // The kernel writes the running statistics through raw pointers: no graph is built for them.
  ops::BatchNormForward f =
      ops::batch_norm_forward(input, running_mean, running_var, weight, bias, options);
  if (autograd::any_requires_grad({input, weight, bias})) {
    const bool batch_stats = options.training || !running_mean.defined();
    // With the fused ReLU the backward reads the output as ReLU's mask (a detached alias: the
    // output's storage, no copy).
    autograd::record(
        options.relu ? "BatchNormReluBackward" : "BatchNormBackward", {input, weight, bias},
        {f.output},
        [x = input.detach(), w = detached(weight), has_bias = bias.defined(), mean = f.save_mean,
         invstd = f.save_invstd, batch_stats, relu_y = options.relu ? f.output.detach() : Tensor()](
            const GradList& g, const NeedList& needs) -> GradList {
          ops::BatchNormGrads r = ops::batch_norm_backward(
              g[0], x, w, mean, invstd, batch_stats,
              {needs[0], needs[1] && w.defined(), needs[2] && has_bias}, relu_y);
          return {r.grad_input, r.grad_weight, r.grad_bias};
        });
  }
  if (options.relu) observe_relu(f.output);  // a test hook on the decisions at the kink
  return f.output;
}

}  // namespace stoke
