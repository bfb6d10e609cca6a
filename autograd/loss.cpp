#include "autograd/loss.h"

#include "autograd/function.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options) {
  ops::CrossEntropyForward f = ops::cross_entropy_forward(logits, target, options);
  if (autograd::any_requires_grad({logits}))
    autograd::record("cross_entropy", {logits}, {f.loss},
                     [x = logits.detach(), t = target.detach(), lse = f.lse, options](
                         const GradList& g, const NeedList&) {
                       return GradList{ops::cross_entropy_backward(g[0], x, t, lse, options)};
                     });
  return f.loss;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  Tensor y = ops::nll_loss(log_probs, target, options);
  if (autograd::any_requires_grad({log_probs}))
    autograd::record("nll_loss", {log_probs}, {y},
                     [shape = log_probs.shape(), t = target.detach(), options](const GradList& g,
                                                                               const NeedList&) {
                       return GradList{ops::nll_loss_backward(g[0], shape, t, options)};
                     });
  return y;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  Tensor y = ops::mse_loss(input, target, reduction);
  if (autograd::any_requires_grad({input, target}))
    autograd::record("mse_loss", {input, target}, {y},
                     [x = input.detach(), t = target.detach(), reduction](const GradList& g,
                                                                          const NeedList& needs) {
                       GradList out(2);
                       if (needs[0]) out[0] = ops::mse_loss_backward(g[0], x, t, reduction);
                       if (needs[1]) out[1] = ops::mse_loss_backward(g[0], t, x, reduction);
                       return out;
                     });
  return y;
}

}  // namespace stoke
