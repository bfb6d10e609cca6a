// Differentiable elementwise functions and the arithmetic/comparison operators on Tensor. Binary
// ops broadcast with NumPy rules; their backward sums the gradient back to each input's shape
// (ops::sum_to). Comparisons, sign-free masks and the in-place optimizer updates are not
// differentiable and are re-exported from ops:: unchanged.
//
// Dtypes: arithmetic (add, sub, mul, maximum, minimum, neg, abs, sign, relu, clamp), comparisons
// and where work on f32, f64, i32, i64 and u8; math functions (div, exp, log, tanh, gelu, ...)
// on f32 and f64 only. Operands must share one dtype (no implicit promotion). A tensor-scalar op
// on an integer tensor needs an integral scalar.
#pragma once

#include <optional>

#include "ops/elementwise.h"

namespace stoke {

// a + b (broadcasting).
Tensor add(const Tensor& a, const Tensor& b);
// a + s.
Tensor add(const Tensor& a, double s);
// a - b (broadcasting).
Tensor sub(const Tensor& a, const Tensor& b);
// a - s.
Tensor sub(const Tensor& a, double s);
// s - a.
Tensor sub(double s, const Tensor& a);
// a * b (broadcasting).
Tensor mul(const Tensor& a, const Tensor& b);
// a * s.
Tensor mul(const Tensor& a, double s);
// a / b (broadcasting; floating dtypes only).
Tensor div(const Tensor& a, const Tensor& b);
// a / s.
Tensor div(const Tensor& a, double s);
// s / a.
Tensor div(double s, const Tensor& a);
// x ** exponent (floating dtypes only).
Tensor pow(const Tensor& x, double exponent);
// Elementwise max / min (broadcasting); NaN propagates, like torch.maximum, and ties split the
// gradient evenly, like torch.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// -x.
Tensor neg(const Tensor& x);
// e**x.
Tensor exp(const Tensor& x);
// Natural logarithm.
Tensor log(const Tensor& x);
// Square root.
Tensor sqrt(const Tensor& x);
// 1 / sqrt(x).
Tensor rsqrt(const Tensor& x);
// |x| (gradient sign(x), 0 at 0).
Tensor abs(const Tensor& x);
// max(x, 0).
Tensor relu(const Tensor& x);
// x for x > 0, negative_slope * x otherwise.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// Logistic sigmoid, 1 / (1 + e**-x).
Tensor sigmoid(const Tensor& x);
// Hyperbolic tangent.
Tensor tanh(const Tensor& x);
// x * sigmoid(x) (SiLU, "swish"), as torch.nn.functional.silu.
Tensor silu(const Tensor& x);
// x * min(max(x + 3, 0), 6) / 6, as torch.nn.functional.hardswish (MobileNetV3).
Tensor hardswish(const Tensor& x);
// GELU: x * Phi(x) (exact, PyTorch's default), or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// with GeluApproximate::tanh.
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::none);
// min(max(x, min), max); a missing bound is not applied, and at least one is required. The
// gradient passes where min <= x <= max.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// -1, 0 or 1 (sign(0) = 0); its gradient is zero.
Tensor sign(const Tensor& x);
// cond ? a : b, elementwise; cond is bool and the three operands broadcast together. cond gets no
// gradient.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Not differentiable: comparisons (bool results) and in-place updates (see ops/elementwise.h).
using ops::add_;
using ops::addcdiv_;
using ops::addcmul_;
using ops::clamp_;
using ops::div_;
using ops::eq;
using ops::ge;
using ops::gt;
using ops::le;
using ops::lerp_;
using ops::lt;
using ops::mul_;
using ops::ne;
using ops::sqrt_;
using ops::sub_;
using ops::zero_;

// Arithmetic operators (differentiable) and comparisons (bool tensors), as in PyTorch.
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator+(const Tensor& a, double s) {
  return add(a, s);
}
inline Tensor operator+(double s, const Tensor& a) {
  return add(a, s);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator-(const Tensor& a, double s) {
  return sub(a, s);
}
inline Tensor operator-(double s, const Tensor& a) {
  return sub(s, a);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator*(const Tensor& a, double s) {
  return mul(a, s);
}
inline Tensor operator*(double s, const Tensor& a) {
  return mul(a, s);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator/(const Tensor& a, double s) {
  return div(a, s);
}
inline Tensor operator/(double s, const Tensor& a) {
  return div(s, a);
}
inline Tensor operator-(const Tensor& a) {
  return neg(a);
}
inline Tensor operator==(const Tensor& a, const Tensor& b) {
  return ops::eq(a, b);
}
inline Tensor operator!=(const Tensor& a, const Tensor& b) {
  return ops::ne(a, b);
}
inline Tensor operator<(const Tensor& a, const Tensor& b) {
  return ops::lt(a, b);
}
inline Tensor operator<=(const Tensor& a, const Tensor& b) {
  return ops::le(a, b);
}
inline Tensor operator>(const Tensor& a, const Tensor& b) {
  return ops::gt(a, b);
}
inline Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ops::ge(a, b);
}
inline Tensor operator==(const Tensor& a, double s) {
  return ops::eq(a, s);
}
inline Tensor operator!=(const Tensor& a, double s) {
  return ops::ne(a, s);
}
inline Tensor operator<(const Tensor& a, double s) {
  return ops::lt(a, s);
}
inline Tensor operator<=(const Tensor& a, double s) {
  return ops::le(a, s);
}
inline Tensor operator>(const Tensor& a, double s) {
  return ops::gt(a, s);
}
inline Tensor operator>=(const Tensor& a, double s) {
  return ops::ge(a, s);
}

}  // namespace stoke
