// Differentiable elementwise functions: forward with ops::, backward with ops:: backward kernels,
// broadcast gradients summed back with ops::sum_to.
#include "autograd/elementwise.h"

#include "autograd/autocast.h"
#include "autograd/elementwise_relu_observer.h"
#include "autograd/function.h"
#include "ops/creation.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

namespace {

// Records a one-input op whose backward is f(grad, saved) with `saved` = x or y (detached).
template <class F>
void record_unary(const char* name, const Tensor& x, const Tensor& y, const Tensor& saved, F f) {
  if (!autograd::any_requires_grad({x})) return;
  autograd::record(name, {x}, {y},
                   [s = saved.detach(), f](const GradList& g, const NeedList&) -> GradList {
                     return {f(g[0], s)};
                   });
}

// Sums g back to `shape` when needed, else undefined.
Tensor reduce_if(bool need, const Tensor& g, const Shape& shape) {
  return need ? ops::sum_to(g, shape) : Tensor();
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  STOKE_PROMOTE(add, a, b);
  Tensor y = ops::add(a, b);
  if (autograd::any_requires_grad({a, b}))
    autograd::record("AddBackward", {a, b}, {y},
                     [sa = a.shape(), sb = b.shape()](const GradList& g, const NeedList& need) {
                       return GradList{reduce_if(need[0], g[0], sa), reduce_if(need[1], g[0], sb)};
                     });
  return y;
}

Tensor add(const Tensor& a, double s) {
  Tensor y = ops::add(a, s);
  record_unary("AddBackward", a, y, a, [](const Tensor& g, const Tensor&) { return g; });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  STOKE_PROMOTE(sub, a, b);
  Tensor y = ops::sub(a, b);
  if (autograd::any_requires_grad({a, b}))
    autograd::record("SubBackward", {a, b}, {y},
                     [sa = a.shape(), sb = b.shape()](const GradList& g, const NeedList& need) {
                       return GradList{reduce_if(need[0], g[0], sa),
                                       need[1] ? ops::neg(ops::sum_to(g[0], sb)) : Tensor()};
                     });
  return y;
}

Tensor sub(const Tensor& a, double s) {
  Tensor y = ops::sub(a, s);
  record_unary("SubBackward", a, y, a, [](const Tensor& g, const Tensor&) { return g; });
  return y;
}

Tensor sub(double s, const Tensor& a) {
  Tensor y = ops::sub(s, a);
  record_unary("RsubBackward", a, y, a, [](const Tensor& g, const Tensor&) { return ops::neg(g); });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  STOKE_PROMOTE(mul, a, b);
  Tensor y = ops::mul(a, b);
  if (autograd::any_requires_grad({a, b}))
    autograd::record("MulBackward", {a, b}, {y},
                     [a = a.detach(), b = b.detach()](const GradList& g, const NeedList& need) {
                       return GradList{
                           need[0] ? ops::sum_to(ops::mul(g[0], b), a.shape()) : Tensor(),
                           need[1] ? ops::sum_to(ops::mul(g[0], a), b.shape()) : Tensor()};
                     });
  return y;
}

Tensor mul(const Tensor& a, double s) {
  Tensor y = ops::mul(a, s);
  record_unary("MulBackward", a, y, a,
               [s](const Tensor& g, const Tensor&) { return ops::mul(g, s); });
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  STOKE_PROMOTE(div, a, b);
  Tensor y = ops::div(a, b);
  if (autograd::any_requires_grad({a, b}))
    autograd::record(
        "DivBackward", {a, b}, {y},
        [a = a.detach(), b = b.detach()](const GradList& g, const NeedList& need) {
          return GradList{
              need[0] ? ops::sum_to(ops::div(g[0], b), a.shape()) : Tensor(),
              need[1] ? ops::sum_to(ops::div_backward_other(g[0], a, b), b.shape()) : Tensor()};
        });
  return y;
}

Tensor div(const Tensor& a, double s) {
  Tensor y = ops::div(a, s);
  record_unary("DivBackward", a, y, a,
               [s](const Tensor& g, const Tensor&) { return ops::div(g, s); });
  return y;
}

Tensor div(double s, const Tensor& a) {
  Tensor y = ops::div(s, a);
  // d(s / a)/da = -s / a^2: on the CPU the tensor-tensor kernel with s as a 0-dim numerator; on
  // a device from its kernels (a 0-dim CPU numerator would be on the wrong device).
  record_unary("RdivBackward", a, y, a, [s](const Tensor& g, const Tensor& x) {
    if (!x.device().is_cpu()) return ops::div(ops::mul(g, -s), ops::mul(x, x));
    return ops::div_backward_other(g, scalar_tensor(s, {.dtype = x.dtype()}), x);
  });
  return y;
}

Tensor pow(const Tensor& x, double exponent) {
  STOKE_AUTOCAST("pow", pow, x, exponent);
  Tensor y = ops::pow(x, exponent);
  record_unary("PowBackward", x, y, x, [exponent](const Tensor& g, const Tensor& s) {
    return ops::pow_backward(g, s, exponent);
  });
  return y;
}

namespace {

// maximum and minimum: the gradient goes to the winner of each element (split evenly on ties),
// Backward(grad, a, b) being a's share.
template <Tensor (*Forward)(const Tensor&, const Tensor&),
          Tensor (*Backward)(const Tensor&, const Tensor&, const Tensor&)>
Tensor extremum(const char* node, const Tensor& a, const Tensor& b) {
  Tensor y = Forward(a, b);
  if (autograd::any_requires_grad({a, b}))
    autograd::record(node, {a, b}, {y},
                     [a = a.detach(), b = b.detach()](const GradList& g, const NeedList& need) {
                       return GradList{
                           need[0] ? ops::sum_to(Backward(g[0], a, b), a.shape()) : Tensor(),
                           need[1] ? ops::sum_to(Backward(g[0], b, a), b.shape()) : Tensor()};
                     });
  return y;
}

}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  STOKE_PROMOTE(maximum, a, b);
  return extremum<ops::maximum, ops::maximum_backward>("MaximumBackward", a, b);
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  STOKE_PROMOTE(minimum, a, b);
  return extremum<ops::minimum, ops::minimum_backward>("MinimumBackward", a, b);
}

Tensor neg(const Tensor& x) {
  Tensor y = ops::neg(x);
  record_unary("NegBackward", x, y, x, [](const Tensor& g, const Tensor&) { return ops::neg(g); });
  return y;
}

Tensor exp(const Tensor& x) {
  STOKE_AUTOCAST("exp", exp, x);
  Tensor y = ops::exp(x);
  record_unary("ExpBackward", x, y, y,
               [](const Tensor& g, const Tensor& s) { return ops::mul(g, s); });
  return y;
}

Tensor log(const Tensor& x) {
  STOKE_AUTOCAST("log", log, x);
  Tensor y = ops::log(x);
  record_unary("LogBackward", x, y, x,
               [](const Tensor& g, const Tensor& s) { return ops::div(g, s); });
  return y;
}

// The unary maps whose backward is ops::NAME_backward(grad, saved), `saved` being the forward's
// input x or output y.
#define STOKE_UNARY_MAP(name, node, saved)                                                     \
  Tensor name(const Tensor& x) {                                                               \
    Tensor y = ops::name(x);                                                                   \
    record_unary(node, x, y, saved,                                                            \
                 [](const Tensor& g, const Tensor& s) { return ops::name##_backward(g, s); }); \
    return y;                                                                                  \
  }
STOKE_UNARY_MAP(sqrt, "SqrtBackward", y)
STOKE_UNARY_MAP(rsqrt, "RsqrtBackward", y)
STOKE_UNARY_MAP(abs, "AbsBackward", x)
STOKE_UNARY_MAP(sigmoid, "SigmoidBackward", y)
STOKE_UNARY_MAP(tanh, "TanhBackward", y)
STOKE_UNARY_MAP(silu, "SiluBackward", x)
STOKE_UNARY_MAP(hardswish, "HardswishBackward", x)
#undef STOKE_UNARY_MAP

Tensor relu(const Tensor& x) {
  Tensor y = ops::relu(x);
  record_unary("ReluBackward", x, y, y,
               [](const Tensor& g, const Tensor& s) { return ops::relu_backward(g, s); });
  observe_relu(y);  // a test hook on the decisions at the kink (elementwise_relu_observer.h)
  return y;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  Tensor y = ops::leaky_relu(x, negative_slope);
  record_unary("LeakyReluBackward", x, y, x, [negative_slope](const Tensor& g, const Tensor& s) {
    return ops::leaky_relu_backward(g, s, negative_slope);
  });
  return y;
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  Tensor y = ops::gelu(x, approximate);
  record_unary("GeluBackward", x, y, x, [approximate](const Tensor& g, const Tensor& s) {
    return ops::gelu_backward(g, s, approximate);
  });
  return y;
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  Tensor y = ops::clamp(x, min, max);
  record_unary("ClampBackward", x, y, x, [min, max](const Tensor& g, const Tensor& s) {
    return ops::clamp_backward(g, s, min, max);
  });
  return y;
}

Tensor sign(const Tensor& x) {
  Tensor y = ops::sign(x);
  record_unary("SignBackward", x, y, x, [](const Tensor& g, const Tensor&) {
    return zeros(g.shape(), {.dtype = g.dtype()});
  });
  return y;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (const auto t = promoted_dtype({&a, &b})) return where(cond, a.to(*t), b.to(*t));
  Tensor y = ops::where(cond, a, b);
  if (autograd::any_requires_grad({a, b}))
    autograd::record(
        "WhereBackward", {cond, a, b}, {y},
        [c = cond.detach(), sa = a.shape(), sb = b.shape()](const GradList& g,
                                                            const NeedList& need) {
          return GradList{
              Tensor(), need[1] ? ops::sum_to(ops::where_backward(g[0], c, true), sa) : Tensor(),
              need[2] ? ops::sum_to(ops::where_backward(g[0], c, false), sb) : Tensor()};
        });
  return y;
}

}  // namespace stoke
