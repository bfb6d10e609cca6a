#include "autograd/softmax.h"

#include "autograd/autocast.h"
#include "autograd/function.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

namespace {

// softmax and log_softmax: the forward kernel, and a backward from the output alone.
template <Tensor (*Forward)(const Tensor&, int64_t),
          Tensor (*Backward)(const Tensor&, const Tensor&, int64_t)>
Tensor softmax_like(const char* node, const Tensor& x, int64_t dim) {
  Tensor y = Forward(x, dim);
  if (autograd::any_requires_grad({x}))
    autograd::record(node, {x}, {y}, [yd = y.detach(), dim](const GradList& g, const NeedList&) {
      return GradList{Backward(g[0], yd, dim)};
    });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  STOKE_AUTOCAST("softmax", softmax, x, dim);
  return softmax_like<ops::softmax, ops::softmax_backward>("SoftmaxBackward", x, dim);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  STOKE_AUTOCAST("log_softmax", log_softmax, x, dim);
  return softmax_like<ops::log_softmax, ops::log_softmax_backward>("LogSoftmaxBackward", x, dim);
}

}  // namespace stoke
