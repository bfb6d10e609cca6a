#include "autograd/softmax.h"

#include "autograd/autocast.h"
#include "autograd/function.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

Tensor softmax(const Tensor& x, int64_t dim) {
  STOKE_AUTOCAST("softmax", softmax, x, dim);
  Tensor y = ops::softmax(x, dim);
  if (autograd::any_requires_grad({x}))
    autograd::record("SoftmaxBackward", {x}, {y},
                     [yd = y.detach(), dim](const GradList& g, const NeedList&) {
                       return GradList{ops::softmax_backward(g[0], yd, dim)};
                     });
  return y;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  STOKE_AUTOCAST("log_softmax", log_softmax, x, dim);
  Tensor y = ops::log_softmax(x, dim);
  if (autograd::any_requires_grad({x}))
    autograd::record("LogSoftmaxBackward", {x}, {y},
                     [yd = y.detach(), dim](const GradList& g, const NeedList&) {
                       return GradList{ops::log_softmax_backward(g[0], yd, dim)};
                     });
  return y;
}

}  // namespace stoke
