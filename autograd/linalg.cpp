#include "autograd/linalg.h"

#include "autograd/autocast.h"
#include "autograd/function.h"

namespace stoke {

Tensor matmul(const Tensor& a, const Tensor& b) {
  STOKE_AUTOCAST("matmul", matmul, a, b);
  Tensor out = ops::matmul(a, b);
  if (autograd::any_requires_grad({a, b})) {
    // The backward kernel works on >= 2-D operands: 1-D ones get the unit dim matmul gave them,
    // and the gradient flowing in is viewed with that dim restored.
    const Tensor a2 = a.dim() == 1 ? a.detach().unsqueeze(0) : a.detach();
    const Tensor b2 = b.dim() == 1 ? b.detach().unsqueeze(1) : b.detach();
    Shape full = broadcast_shapes(Shape(a2.shape().begin(), a2.shape().end() - 2),
                                  Shape(b2.shape().begin(), b2.shape().end() - 2), "matmul");
    full.push_back(a2.size(-2));
    full.push_back(b2.size(-1));
    autograd::record(
        "MatmulBackward", {a, b}, {out},
        [a2, b2, full, a_shape = a.shape(), b_shape = b.shape()](const autograd::GradList& g,
                                                                 const autograd::NeedList& needs) {
          // (core's view of a 0-dim tensor as [1, 1] is refused, so a dot product's gradient
          // gets its two unit dims by unsqueeze.)
          const Tensor g2 = g[0].dim() == 0 ? g[0].unsqueeze(0).unsqueeze(0) : g[0].reshape(full);
          ops::MatmulGrads r = ops::matmul_backward(g2, a2, b2, needs[0], needs[1]);
          return autograd::GradList{r.grad_a.defined() ? r.grad_a.reshape(a_shape) : Tensor(),
                                    r.grad_b.defined() ? r.grad_b.reshape(b_shape) : Tensor()};
        });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  STOKE_AUTOCAST("linear", linear, x, weight, bias);
  Tensor out = ops::linear(x, weight, bias);
  if (autograd::any_requires_grad({x, weight, bias})) {
    autograd::record("LinearBackward", {x, weight, bias}, {out},
                     [x = x.detach(), w = weight.detach()](const autograd::GradList& g,
                                                           const autograd::NeedList& needs) {
                       ops::LinearGrads r = ops::linear_backward(g[0], x, w, needs[0], needs[1],
                                                                 needs.size() > 2 && needs[2]);
                       return autograd::GradList{r.grad_input, r.grad_weight, r.grad_bias};
                     });
  }
  return out;
}

}  // namespace stoke
