// The kernels behind the differentiable elementwise functions of stoke:: (autograd/elementwise.h,
// documented there, dtypes included): ops::add ... ops::where take the same arguments and compute
// the same results without recording autograd, on the tensors' device. Documented here is what
// only ops:: has: the comparisons and in-place updates (stoke:: re-exports them) and the backward
// kernels the differentiable versions compose.
#pragma once

#include <optional>

#include "core/elementwise_ops.h"
#include "core/tensor.h"

namespace stoke {
// Which GELU formula: the exact erf form (PyTorch's default) or the tanh approximation. In
// namespace stoke (not ops) so that argument-dependent lookup of gelu(x, GeluApproximate::tanh)
// finds only the differentiable stoke::gelu.
enum class GeluApproximate { none, tanh };
}  // namespace stoke

namespace stoke::ops {

// --- the kernels of stoke::add ... stoke::where (autograd/elementwise.h) ------------------------

// add, sub, mul, div, maximum, minimum of two tensors and neg, exp, ..., hardswish of one: one
// function per entry of the op lists in core/elementwise_ops.h.
#define STOKE_DECLARE_BINARY(name) Tensor name(const Tensor& a, const Tensor& b);
#define STOKE_DECLARE_UNARY(name) Tensor name(const Tensor& x);
STOKE_BINARY_OPS(STOKE_DECLARE_BINARY)
STOKE_UNARY_FUNCTION_OPS(STOKE_DECLARE_UNARY)
#undef STOKE_DECLARE_BINARY
#undef STOKE_DECLARE_UNARY

Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor sub(double s, const Tensor& a);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor div(double s, const Tensor& a);
Tensor pow(const Tensor& x, double exponent);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::none);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// --- comparisons (bool results, not differentiable) -------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b);  // a == b
Tensor ne(const Tensor& a, const Tensor& b);  // a != b
Tensor lt(const Tensor& a, const Tensor& b);  // a < b
Tensor le(const Tensor& a, const Tensor& b);  // a <= b
Tensor gt(const Tensor& a, const Tensor& b);  // a > b
Tensor ge(const Tensor& a, const Tensor& b);  // a >= b
Tensor eq(const Tensor& a, double s);         // a == s
Tensor ne(const Tensor& a, double s);         // a != s
Tensor lt(const Tensor& a, double s);         // a < s
Tensor le(const Tensor& a, double s);         // a <= s
Tensor gt(const Tensor& a, double s);         // a > s
Tensor ge(const Tensor& a, double s);         // a >= s

// --- in place (any strides; `other` operands broadcast to t's shape) --------------------------
// These write into t and return it. They record nothing, and refuse a tensor that requires grad
// while grad mode is on (run optimizer updates under NoGradGuard).

// t += alpha * other.
Tensor add_(const Tensor& t, const Tensor& other, double alpha = 1);
// t += s.
Tensor add_(const Tensor& t, double s);
// t -= alpha * other.
Tensor sub_(const Tensor& t, const Tensor& other, double alpha = 1);
// t -= s.
Tensor sub_(const Tensor& t, double s);
// t *= other.
Tensor mul_(const Tensor& t, const Tensor& other);
// t *= s.
Tensor mul_(const Tensor& t, double s);
// t /= other (floating).
Tensor div_(const Tensor& t, const Tensor& other);
// t /= s (floating).
Tensor div_(const Tensor& t, double s);
// t += value * a * b.
Tensor addcmul_(const Tensor& t, const Tensor& a, const Tensor& b, double value = 1);
// t += value * a / b (floating).
Tensor addcdiv_(const Tensor& t, const Tensor& a, const Tensor& b, double value = 1);
// t = sqrt(t) (floating).
Tensor sqrt_(const Tensor& t);
// t = 0 (any dtype).
Tensor zero_(const Tensor& t);
// t += weight * (end - t) (floating).
Tensor lerp_(const Tensor& t, const Tensor& end, double weight);
// t = clamp(t, min, max).
Tensor clamp_(const Tensor& t, std::optional<double> min, std::optional<double> max);

// --- backward kernels -------------------------------------------------------------------------

// Sums `grad` over the dims along which a tensor of `shape` was broadcast to grad's shape, so
// that the result has exactly `shape` (leading dims summed away, size-1 dims summed with
// keepdim). Returns `grad` itself when the shapes are equal. Accumulates in double.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// grad where out > 0, else 0 (out = relu(x); same mask as x > 0).
Tensor relu_backward(const Tensor& grad, const Tensor& out);
// grad for x > 0, negative_slope * grad otherwise.
Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double negative_slope);
// grad * out * (1 - out), out = sigmoid(x).
Tensor sigmoid_backward(const Tensor& grad, const Tensor& out);
// grad * (1 - out^2), out = tanh(x).
Tensor tanh_backward(const Tensor& grad, const Tensor& out);
// grad * s * (1 + x * (1 - s)), s = sigmoid(x).
Tensor silu_backward(const Tensor& grad, const Tensor& x);
// 0 for x < -3, grad * (x / 3 + 1/2) for -3 <= x < 3, grad for x >= 3: the boundaries of torch's
// vectorized CPU kernel, which every tensor of 8 or more elements takes.
Tensor hardswish_backward(const Tensor& grad, const Tensor& x);
// grad * d gelu(x) / dx for the given formula.
Tensor gelu_backward(const Tensor& grad, const Tensor& x,
                     GeluApproximate approximate = GeluApproximate::none);
// grad where min <= x <= max (the missing bound always passes), else 0, like torch.
Tensor clamp_backward(const Tensor& grad, const Tensor& x, std::optional<double> min,
                      std::optional<double> max);
// grad * sign(x).
Tensor abs_backward(const Tensor& grad, const Tensor& x);
// grad * exponent * x^(exponent - 1) (0 when exponent == 0).
Tensor pow_backward(const Tensor& grad, const Tensor& x, double exponent);
// grad / (2 * out), out = sqrt(x).
Tensor sqrt_backward(const Tensor& grad, const Tensor& out);
// -0.5 * grad * out^3, out = rsqrt(x).
Tensor rsqrt_backward(const Tensor& grad, const Tensor& out);
// Gradient of a / b with respect to b before reduction: -grad * a / b^2 (broadcast shape).
Tensor div_backward_other(const Tensor& grad, const Tensor& a, const Tensor& b);
// Gradient of maximum(a, b) / minimum(a, b) with respect to a before reduction: grad where a
// wins, grad / 2 on ties (as torch), 0 elsewhere. For b, swap a and b.
Tensor maximum_backward(const Tensor& grad, const Tensor& a, const Tensor& b);
Tensor minimum_backward(const Tensor& grad, const Tensor& a, const Tensor& b);
// Gradient of where(cond, a, b) before reduction: grad where cond (for_a) or where !cond
// (!for_a), 0 elsewhere; shape of the broadcast of grad and cond.
Tensor where_backward(const Tensor& grad, const Tensor& cond, bool for_a);

}  // namespace stoke::ops
