// The elementwise entry points: the checks every device shares (dtypes agree, shapes broadcast,
// in-place targets writable, a clamp bound given), in the order the tests expect, then the backend
// of the tensors' device (ops/cpu/elementwise*.cpp, ops/cuda/elementwise*.cpp).
#include <cmath>

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/elementwise.h"

namespace stoke::ops {

namespace {

Tensor binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  Backend& backend = dispatch(op, {&a, &b});
  check_same_dtype(op, a, "a", b, "b");
  broadcast_shapes(a.shape(), b.shape(), op);
  return backend.binary(kind, a, b);
}

Tensor binary_scalar(const char* op, BinaryOp kind, const Tensor& a, double s, bool scalar_first) {
  return dispatch(op, {&a}).binary_scalar(kind, a, s, scalar_first);
}

Tensor compare(const char* op, CompareOp kind, const Tensor& a, const Tensor& b) {
  Backend& backend = dispatch(op, {&a, &b});
  check_same_dtype(op, a, "a", b, "b");
  broadcast_shapes(a.shape(), b.shape(), op);
  return backend.compare(kind, a, b);
}

Tensor compare_scalar(const char* op, CompareOp kind, const Tensor& a, double s) {
  return dispatch(op, {&a}).compare_scalar(kind, a, s);
}

Tensor unary(const char* op, UnaryOp kind, const Tensor& x) {
  return dispatch(op, {&x}).unary(kind, x);
}

void check_bounds(const char* op, std::optional<double> lo, std::optional<double> hi) {
  STOKE_CHECK(lo || hi, op, "expected at least one of min and max, got neither");
}

// The backend of an in-place op with tensor operands, after the checks every device shares:
// the target is writable, the operands have its dtype and broadcast to its shape.
Backend& inplace_dispatch(const char* op, const Tensor& t, const Tensor& a,
                          const Tensor* b = nullptr) {
  Backend& backend = dispatch(op, {&t, &a, b});
  check_inplace_target(op, t);
  for (const Tensor* o : {&a, b}) {
    if (!o) continue;
    check_same_dtype(op, t, "self", *o, "other");
    check_broadcasts_to(op, *o, t.shape());
  }
  return backend;
}

// The same for an in-place op with a scalar operand.
Backend& inplace_dispatch(const char* op, const Tensor& t) {
  Backend& backend = dispatch(op, {&t});
  check_inplace_target(op, t);
  return backend;
}

// The backend of a backward map f(grad, saved), after the checks every device shares.
Backend& backward_dispatch(const char* op, const Tensor& grad, const Tensor& saved) {
  Backend& backend = dispatch(op, {&grad, &saved});
  check_same_dtype(op, grad, "grad", saved, "saved tensor");
  broadcast_shapes(grad.shape(), saved.shape(), op);
  return backend;
}

// The backend of a backward kernel of grad and the two operands of a binary op.
Backend& ternary_dispatch(const char* op, const Tensor& grad, const Tensor& a, const Tensor& b) {
  Backend& backend = dispatch(op, {&grad, &a, &b});
  check_same_dtype(op, grad, "grad", a, "a");
  check_same_dtype(op, grad, "grad", b, "b");
  broadcast_shapes(broadcast_shapes(grad.shape(), a.shape(), op), b.shape(), op);
  return backend;
}

}  // namespace

// --- arithmetic -------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  return binary("add", BinaryOp::add, a, b);
}
Tensor add(const Tensor& a, double s) {
  return binary_scalar("add", BinaryOp::add, a, s, false);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary("sub", BinaryOp::sub, a, b);
}
Tensor sub(const Tensor& a, double s) {
  return binary_scalar("sub", BinaryOp::sub, a, s, false);
}
Tensor sub(double s, const Tensor& a) {
  return binary_scalar("sub", BinaryOp::sub, a, s, true);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary("mul", BinaryOp::mul, a, b);
}
Tensor mul(const Tensor& a, double s) {
  return binary_scalar("mul", BinaryOp::mul, a, s, false);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary("div", BinaryOp::div, a, b);
}
Tensor div(const Tensor& a, double s) {
  return binary_scalar("div", BinaryOp::div, a, s, false);
}
Tensor div(double s, const Tensor& a) {
  return binary_scalar("div", BinaryOp::div, a, s, true);
}
Tensor pow(const Tensor& x, double exponent) {
  return dispatch("pow", {&x}).pow(x, exponent);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary("maximum", BinaryOp::maximum, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary("minimum", BinaryOp::minimum, a, b);
}

// --- unary ------------------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  return unary("neg", UnaryOp::neg, x);
}
Tensor exp(const Tensor& x) {
  return unary("exp", UnaryOp::exp, x);
}
Tensor log(const Tensor& x) {
  return unary("log", UnaryOp::log, x);
}
Tensor sqrt(const Tensor& x) {
  return unary("sqrt", UnaryOp::sqrt, x);
}
Tensor rsqrt(const Tensor& x) {
  return unary("rsqrt", UnaryOp::rsqrt, x);
}
Tensor abs(const Tensor& x) {
  return unary("abs", UnaryOp::abs, x);
}
Tensor relu(const Tensor& x) {
  return unary("relu", UnaryOp::relu, x);
}
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return dispatch("leaky_relu", {&x}).leaky_relu(x, negative_slope);
}
Tensor sigmoid(const Tensor& x) {
  return unary("sigmoid", UnaryOp::sigmoid, x);
}
Tensor tanh(const Tensor& x) {
  return unary("tanh", UnaryOp::tanh, x);
}
Tensor silu(const Tensor& x) {
  return unary("silu", UnaryOp::silu, x);
}
Tensor hardswish(const Tensor& x) {
  return unary("hardswish", UnaryOp::hardswish, x);
}
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  return unary("gelu", approximate == GeluApproximate::tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu,
               x);
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_bounds("clamp", min, max);
  return dispatch("clamp", {&x}).clamp(x, min, max);
}
Tensor sign(const Tensor& x) {
  return unary("sign", UnaryOp::sign, x);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  STOKE_CHECK(cond.dtype() == DType::boolean, "where", "expected cond of dtype bool, got ",
              cond.dtype());
  check_same_dtype("where", a, "a", b, "b");
  broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  return dispatch("where", {&cond, &a, &b}).where(cond, a, b);
}

// --- comparisons ------------------------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) {
  return compare("eq", CompareOp::eq, a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare("ne", CompareOp::ne, a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare("lt", CompareOp::lt, a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare("le", CompareOp::le, a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare("gt", CompareOp::gt, a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare("ge", CompareOp::ge, a, b);
}
Tensor eq(const Tensor& a, double s) {
  return compare_scalar("eq", CompareOp::eq, a, s);
}
Tensor ne(const Tensor& a, double s) {
  return compare_scalar("ne", CompareOp::ne, a, s);
}
Tensor lt(const Tensor& a, double s) {
  return compare_scalar("lt", CompareOp::lt, a, s);
}
Tensor le(const Tensor& a, double s) {
  return compare_scalar("le", CompareOp::le, a, s);
}
Tensor gt(const Tensor& a, double s) {
  return compare_scalar("gt", CompareOp::gt, a, s);
}
Tensor ge(const Tensor& a, double s) {
  return compare_scalar("ge", CompareOp::ge, a, s);
}

// --- in place ---------------------------------------------------------------------------------

Tensor add_(const Tensor& t, const Tensor& other, double alpha) {
  inplace_dispatch("add_", t, other).binary_(BinaryOp::add, t, other, alpha);
  return t;
}
Tensor add_(const Tensor& t, double s) {
  inplace_dispatch("add_", t).binary_scalar_(BinaryOp::add, t, s);
  return t;
}
Tensor sub_(const Tensor& t, const Tensor& other, double alpha) {
  inplace_dispatch("sub_", t, other).binary_(BinaryOp::sub, t, other, alpha);
  return t;
}
Tensor sub_(const Tensor& t, double s) {
  inplace_dispatch("sub_", t).binary_scalar_(BinaryOp::sub, t, s);
  return t;
}
Tensor mul_(const Tensor& t, const Tensor& other) {
  inplace_dispatch("mul_", t, other).binary_(BinaryOp::mul, t, other, 1.0);
  return t;
}
Tensor mul_(const Tensor& t, double s) {
  inplace_dispatch("mul_", t).binary_scalar_(BinaryOp::mul, t, s);
  return t;
}
Tensor div_(const Tensor& t, const Tensor& other) {
  inplace_dispatch("div_", t, other).binary_(BinaryOp::div, t, other, 1.0);
  return t;
}
Tensor div_(const Tensor& t, double s) {
  inplace_dispatch("div_", t).binary_scalar_(BinaryOp::div, t, s);
  return t;
}

Tensor addcmul_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  inplace_dispatch("addcmul_", t, a, &b).addcmul_(t, a, b, value);
  return t;
}

Tensor addcdiv_(const Tensor& t, const Tensor& a, const Tensor& b, double value) {
  inplace_dispatch("addcdiv_", t, a, &b).addcdiv_(t, a, b, value);
  return t;
}

Tensor sqrt_(const Tensor& t) {
  inplace_dispatch("sqrt_", t).sqrt_(t);
  return t;
}

Tensor zero_(const Tensor& t) {
  inplace_dispatch("zero_", t).zero_(t);
  return t;
}

Tensor lerp_(const Tensor& t, const Tensor& end, double weight) {
  inplace_dispatch("lerp_", t, end).lerp_(t, end, weight);
  return t;
}

Tensor clamp_(const Tensor& t, std::optional<double> min, std::optional<double> max) {
  Backend& backend = inplace_dispatch("clamp_", t);
  check_bounds("clamp_", min, max);
  backend.clamp_(t, min, max);
  return t;
}

// --- backward kernels -------------------------------------------------------------------------

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const Shape& gs = grad.shape();
  bool ok = shape.size() <= gs.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) {
    const int64_t d = gs[gs.size() - shape.size() + i];
    ok = shape[i] == d || shape[i] == 1;
  }
  STOKE_CHECK(ok, "sum_to", "cannot sum a tensor of shape ", gs, " to shape ", shape,
              " (expected a shape that broadcasts to ", gs, ")");
  return dispatch("sum_to", {&grad}).sum_to(grad, shape);
}

Tensor relu_backward(const Tensor& grad, const Tensor& out) {
  return backward_dispatch("relu_backward", grad, out).relu_backward(grad, out);
}

Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double negative_slope) {
  return backward_dispatch("leaky_relu_backward", grad, x)
      .unary_backward(UnaryGradOp::leaky_relu, grad, x, {.negative_slope = negative_slope});
}

Tensor sigmoid_backward(const Tensor& grad, const Tensor& out) {
  return backward_dispatch("sigmoid_backward", grad, out)
      .unary_backward(UnaryGradOp::sigmoid, grad, out, {});
}

Tensor tanh_backward(const Tensor& grad, const Tensor& out) {
  return backward_dispatch("tanh_backward", grad, out)
      .unary_backward(UnaryGradOp::tanh, grad, out, {});
}

Tensor silu_backward(const Tensor& grad, const Tensor& x) {
  return backward_dispatch("silu_backward", grad, x).unary_backward(UnaryGradOp::silu, grad, x, {});
}

Tensor hardswish_backward(const Tensor& grad, const Tensor& x) {
  return backward_dispatch("hardswish_backward", grad, x)
      .unary_backward(UnaryGradOp::hardswish, grad, x, {});
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApproximate approximate) {
  return backward_dispatch("gelu_backward", grad, x)
      .unary_backward(
          approximate == GeluApproximate::tanh ? UnaryGradOp::gelu_tanh : UnaryGradOp::gelu, grad,
          x, {});
}

Tensor clamp_backward(const Tensor& grad, const Tensor& x, std::optional<double> min,
                      std::optional<double> max) {
  // A missing bound is infinite: it always passes.
  const double lo = min ? *min : -INFINITY, hi = max ? *max : INFINITY;
  return backward_dispatch("clamp_backward", grad, x)
      .unary_backward(UnaryGradOp::clamp, grad, x, {.min = lo, .max = hi});
}

Tensor abs_backward(const Tensor& grad, const Tensor& x) {
  return backward_dispatch("abs_backward", grad, x).unary_backward(UnaryGradOp::abs, grad, x, {});
}

Tensor pow_backward(const Tensor& grad, const Tensor& x, double exponent) {
  return backward_dispatch("pow_backward", grad, x).pow_backward(grad, x, exponent);
}

Tensor sqrt_backward(const Tensor& grad, const Tensor& out) {
  return backward_dispatch("sqrt_backward", grad, out)
      .unary_backward(UnaryGradOp::sqrt, grad, out, {});
}

Tensor rsqrt_backward(const Tensor& grad, const Tensor& out) {
  return backward_dispatch("rsqrt_backward", grad, out)
      .unary_backward(UnaryGradOp::rsqrt, grad, out, {});
}

Tensor div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return ternary_dispatch("div_backward", grad, a, b).div_backward_other(grad, a, b);
}

Tensor maximum_backward(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return ternary_dispatch("maximum_backward", grad, a, b).minmax_backward(true, grad, a, b);
}

Tensor minimum_backward(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return ternary_dispatch("minimum_backward", grad, a, b).minmax_backward(false, grad, a, b);
}

Tensor where_backward(const Tensor& grad, const Tensor& cond, bool for_a) {
  STOKE_CHECK(cond.dtype() == DType::boolean, "where_backward", "expected cond of dtype bool, got ",
              cond.dtype());
  Backend& backend = dispatch("where_backward", {&grad, &cond});
  broadcast_shapes(grad.shape(), cond.shape(), "where_backward");
  return backend.where_backward(grad, cond, for_a);
}

}  // namespace stoke::ops
