// The elementwise entry points: the checks every device shares (dtypes agree, shapes broadcast,
// in-place targets writable, a clamp bound given), in the order the tests expect, then the backend
// of the tensors' device (ops/cpu/elementwise*.cpp, ops/cuda/elementwise*.cpp).
#include <cmath>

#include "ops/backend.h"
#include "ops/check.h"
#include "ops/elementwise.h"
#include "ops/memory_format.h"

namespace stoke::ops {

namespace {

// f(operands...), where the output of shape `out` keeps channels_last: then f runs on the
// operands' (N, H, W, C) views and its result is seen back as (N, C, H, W) with NHWC strides
// (ops/memory_format.h). Each element gets the same operations either way.
template <class F, class... T>
Tensor keep_format(const Shape& out, F&& f, const T&... operands) {
  if (elementwise_format({&operands...}, out) == MemoryFormat::channels_last)
    return nchw_view(f(nhwc_view(operands)...));
  return f(operands...);
}

Tensor binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  Backend& backend = dispatch(op, {&a, &b});
  check_same_dtype(op, a, "a", b, "b");
  return keep_format(
      broadcast_shapes(a.shape(), b.shape(), op),
      [&](const Tensor& x, const Tensor& y) { return backend.binary(kind, x, y); }, a, b);
}

Tensor binary_scalar(const char* op, BinaryOp kind, const Tensor& a, double s, bool scalar_first) {
  Backend& backend = dispatch(op, {&a});
  return keep_format(
      a.shape(), [&](const Tensor& x) { return backend.binary_scalar(kind, x, s, scalar_first); },
      a);
}

Tensor compare(const char* op, CompareOp kind, const Tensor& a, const Tensor& b) {
  Backend& backend = dispatch(op, {&a, &b});
  check_same_dtype(op, a, "a", b, "b");
  return keep_format(
      broadcast_shapes(a.shape(), b.shape(), op),
      [&](const Tensor& x, const Tensor& y) { return backend.compare(kind, x, y); }, a, b);
}

Tensor compare_scalar(const char* op, CompareOp kind, const Tensor& a, double s) {
  Backend& backend = dispatch(op, {&a});
  return keep_format(
      a.shape(), [&](const Tensor& x) { return backend.compare_scalar(kind, x, s); }, a);
}

Tensor unary(const char* op, UnaryOp kind, const Tensor& x) {
  Backend& backend = dispatch(op, {&x});
  return keep_format(
      x.shape(), [&](const Tensor& v) { return backend.unary(kind, v); }, x);
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

// t (op)= alpha * other, after the checks every device shares.
Tensor binary_inplace(const char* op, BinaryOp kind, const Tensor& t, const Tensor& other,
                      double alpha) {
  inplace_dispatch(op, t, other).binary_(kind, t, other, alpha);
  return t;
}

// The same for an in-place op with a scalar operand.
Backend& inplace_dispatch(const char* op, const Tensor& t) {
  Backend& backend = dispatch(op, {&t});
  check_inplace_target(op, t);
  return backend;
}

// A backward map f(backend, grad, saved), after the checks every device shares.
template <class F>
Tensor backward_map(const char* op, const Tensor& grad, const Tensor& saved, F&& f) {
  Backend& backend = dispatch(op, {&grad, &saved});
  check_same_dtype(op, grad, "grad", saved, "saved tensor");
  return keep_format(
      broadcast_shapes(grad.shape(), saved.shape(), op),
      [&](const Tensor& g, const Tensor& v) { return f(backend, g, v); }, grad, saved);
}

// A backward kernel f(backend, grad, a, b) of grad and the two operands of a binary op.
template <class F>
Tensor ternary_map(const char* op, const Tensor& grad, const Tensor& a, const Tensor& b, F&& f) {
  Backend& backend = dispatch(op, {&grad, &a, &b});
  check_same_dtype(op, grad, "grad", a, "a");
  check_same_dtype(op, grad, "grad", b, "b");
  return keep_format(
      broadcast_shapes(broadcast_shapes(grad.shape(), a.shape(), op), b.shape(), op),
      [&](const Tensor& g, const Tensor& x, const Tensor& y) { return f(backend, g, x, y); }, grad,
      a, b);
}

}  // namespace

// --- the maps of the op lists (core/elementwise_ops.h) and their scalar forms -------------------

#define STOKE_DEFINE_BINARY(name)                 \
  Tensor name(const Tensor& a, const Tensor& b) { \
    return binary(#name, BinaryOp::name, a, b);   \
  }
#define STOKE_DEFINE_UNARY(name)           \
  Tensor name(const Tensor& x) {           \
    return unary(#name, UnaryOp::name, x); \
  }
#define STOKE_DEFINE_COMPARE(name)                       \
  Tensor name(const Tensor& a, const Tensor& b) {        \
    return compare(#name, CompareOp::name, a, b);        \
  }                                                      \
  Tensor name(const Tensor& a, double s) {               \
    return compare_scalar(#name, CompareOp::name, a, s); \
  }
STOKE_BINARY_OPS(STOKE_DEFINE_BINARY)
STOKE_UNARY_FUNCTION_OPS(STOKE_DEFINE_UNARY)
STOKE_COMPARE_OPS(STOKE_DEFINE_COMPARE)
#undef STOKE_DEFINE_BINARY
#undef STOKE_DEFINE_UNARY
#undef STOKE_DEFINE_COMPARE

// a (op) s for add, sub, mul and div, s (op) a for sub and div.
#define STOKE_DEFINE_SCALAR(name)                             \
  Tensor name(const Tensor& a, double s) {                    \
    return binary_scalar(#name, BinaryOp::name, a, s, false); \
  }
#define STOKE_DEFINE_SCALAR_FIRST(name)                      \
  Tensor name(double s, const Tensor& a) {                   \
    return binary_scalar(#name, BinaryOp::name, a, s, true); \
  }
STOKE_DEFINE_SCALAR(add)
STOKE_DEFINE_SCALAR(sub)
STOKE_DEFINE_SCALAR(mul)
STOKE_DEFINE_SCALAR(div)
STOKE_DEFINE_SCALAR_FIRST(sub)
STOKE_DEFINE_SCALAR_FIRST(div)
#undef STOKE_DEFINE_SCALAR
#undef STOKE_DEFINE_SCALAR_FIRST

Tensor pow(const Tensor& x, double exponent) {
  Backend& backend = dispatch("pow", {&x});
  return keep_format(
      x.shape(), [&](const Tensor& v) { return backend.pow(v, exponent); }, x);
}

// --- the unary maps with parameters and where ---------------------------------------------------

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  Backend& backend = dispatch("leaky_relu", {&x});
  return keep_format(
      x.shape(), [&](const Tensor& v) { return backend.leaky_relu(v, negative_slope); }, x);
}
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  return unary("gelu", approximate == GeluApproximate::tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu,
               x);
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_bounds("clamp", min, max);
  Backend& backend = dispatch("clamp", {&x});
  return keep_format(
      x.shape(), [&](const Tensor& v) { return backend.clamp(v, min, max); }, x);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  STOKE_CHECK(cond.dtype() == DType::boolean, "where", "expected cond of dtype bool, got ",
              cond.dtype());
  check_same_dtype("where", a, "a", b, "b");
  const Shape out =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Backend& backend = dispatch("where", {&cond, &a, &b});
  return keep_format(
      out,
      [&](const Tensor& c, const Tensor& x, const Tensor& y) { return backend.where(c, x, y); },
      cond, a, b);
}

// --- in place ---------------------------------------------------------------------------------

Tensor add_(const Tensor& t, const Tensor& other, double alpha) {
  return binary_inplace("add_", BinaryOp::add, t, other, alpha);
}
Tensor sub_(const Tensor& t, const Tensor& other, double alpha) {
  return binary_inplace("sub_", BinaryOp::sub, t, other, alpha);
}
Tensor mul_(const Tensor& t, const Tensor& other) {
  return binary_inplace("mul_", BinaryOp::mul, t, other, 1.0);
}
Tensor div_(const Tensor& t, const Tensor& other) {
  return binary_inplace("div_", BinaryOp::div, t, other, 1.0);
}

// t (op)= s for add_, sub_, mul_ and div_.
#define STOKE_DEFINE_INPLACE_SCALAR(name)                                \
  Tensor name##_(const Tensor& t, double s) {                            \
    inplace_dispatch(#name "_", t).binary_scalar_(BinaryOp::name, t, s); \
    return t;                                                            \
  }
STOKE_DEFINE_INPLACE_SCALAR(add)
STOKE_DEFINE_INPLACE_SCALAR(sub)
STOKE_DEFINE_INPLACE_SCALAR(mul)
STOKE_DEFINE_INPLACE_SCALAR(div)
#undef STOKE_DEFINE_INPLACE_SCALAR

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
  return backward_map("relu_backward", grad, out, [](Backend& b, const Tensor& g, const Tensor& y) {
    return b.relu_backward(g, y);
  });
}

// The backward maps without parameters; `saved` is the forward's input or output, as each is
// declared in ops/elementwise.h.
#define STOKE_DEFINE_UNARY_BACKWARD(name)                                       \
  Tensor name##_backward(const Tensor& grad, const Tensor& saved) {             \
    return backward_map(#name "_backward", grad, saved,                         \
                        [](Backend& b, const Tensor& g, const Tensor& s) {      \
                          return b.unary_backward(UnaryGradOp::name, g, s, {}); \
                        });                                                     \
  }
STOKE_DEFINE_UNARY_BACKWARD(sigmoid)
STOKE_DEFINE_UNARY_BACKWARD(tanh)
STOKE_DEFINE_UNARY_BACKWARD(silu)
STOKE_DEFINE_UNARY_BACKWARD(hardswish)
STOKE_DEFINE_UNARY_BACKWARD(abs)
STOKE_DEFINE_UNARY_BACKWARD(sqrt)
STOKE_DEFINE_UNARY_BACKWARD(rsqrt)
#undef STOKE_DEFINE_UNARY_BACKWARD

Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double negative_slope) {
  return backward_map(
      "leaky_relu_backward", grad, x, [&](Backend& b, const Tensor& g, const Tensor& v) {
        return b.unary_backward(UnaryGradOp::leaky_relu, g, v, {.negative_slope = negative_slope});
      });
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApproximate approximate) {
  const UnaryGradOp kind =
      approximate == GeluApproximate::tanh ? UnaryGradOp::gelu_tanh : UnaryGradOp::gelu;
  return backward_map("gelu_backward", grad, x, [&](Backend& b, const Tensor& g, const Tensor& v) {
    return b.unary_backward(kind, g, v, {});
  });
}

Tensor clamp_backward(const Tensor& grad, const Tensor& x, std::optional<double> min,
                      std::optional<double> max) {
  // A missing bound is infinite: it always passes.
  const double lo = min ? *min : -INFINITY, hi = max ? *max : INFINITY;
  return backward_map("clamp_backward", grad, x, [&](Backend& b, const Tensor& g, const Tensor& v) {
    return b.unary_backward(UnaryGradOp::clamp, g, v, {.min = lo, .max = hi});
  });
}

Tensor pow_backward(const Tensor& grad, const Tensor& x, double exponent) {
  return backward_map("pow_backward", grad, x, [&](Backend& b, const Tensor& g, const Tensor& v) {
    return b.pow_backward(g, v, exponent);
  });
}

Tensor div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return ternary_map("div_backward", grad, a, b,
                     [](Backend& be, const Tensor& g, const Tensor& x, const Tensor& y) {
                       return be.div_backward_other(g, x, y);
                     });
}

Tensor maximum_backward(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return ternary_map("maximum_backward", grad, a, b,
                     [](Backend& be, const Tensor& g, const Tensor& x, const Tensor& y) {
                       return be.minmax_backward(true, g, x, y);
                     });
}

Tensor minimum_backward(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return ternary_map("minimum_backward", grad, a, b,
                     [](Backend& be, const Tensor& g, const Tensor& x, const Tensor& y) {
                       return be.minmax_backward(false, g, x, y);
                     });
}

Tensor where_backward(const Tensor& grad, const Tensor& cond, bool for_a) {
  STOKE_CHECK(cond.dtype() == DType::boolean, "where_backward", "expected cond of dtype bool, got ",
              cond.dtype());
  Backend& backend = dispatch("where_backward", {&grad, &cond});
  return keep_format(
      broadcast_shapes(grad.shape(), cond.shape(), "where_backward"),
      [&](const Tensor& g, const Tensor& c) { return backend.where_backward(g, c, for_a); }, grad,
      cond);
}

}  // namespace stoke::ops
