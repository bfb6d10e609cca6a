// Unary elementwise CPU kernels (math functions and activations) and their backward kernels.
#include <bit>
#include <cmath>
#include <cstdint>

#include "ops/check.h"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/creation.h"
#include "ops/backend.h"
#include "ops/elementwise.h"

namespace stoke::ops {

namespace {

using cpu::map;
using cpu::scalar_as;

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCoeff = 0.044715;

// e**x in f32 with a Cephes-style polynomial that the compiler vectorizes (std::exp stays a
// scalar libm call): round x / ln2 to n, reduce r = x - n ln2 (two-part ln2), a degree-6
// polynomial for e**r, and scale by 2**n in two halves so that results down into the denormal
// range and up to FLT_MAX are exact powers. Max relative error about 2 ulp; inf, -inf and NaN
// are handled.
inline float exp_f32(float x) {
  constexpr float kHi = 88.72283935546875f;  // ln(FLT_MAX)
  constexpr float kLo = -103.972084045410f;  // below: the result rounds to 0
  constexpr float kMagic = 12582912.0f;      // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < kLo ? kLo : (x > kHi ? kHi : x);
  const float t = xc * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t ni =
      static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kMagic));
  const int32_t h = ni >> 1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(h + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(ni - h + 127) << 23);
  const float res = y * s1 * s2;
  return x > kHi ? INFINITY : (x < kLo ? 0.0f : res);
}

// e**v: the vectorizable f32 version above, libm for f64 (gradcheck precision).
template <class T>
T exp_value(T v) {
  if constexpr (std::is_same_v<T, float>)
    return exp_f32(v);
  else
    return std::exp(v);
}

// erfc(z) for z >= 0 in f32, vectorizable: Numerical Recipes' erfcc (Chebyshev fit, fractional
// error below 1.2e-7), so the GELU CDF keeps its relative accuracy deep in the left tail, where
// 1 + erf(x) would cancel.
inline float erfc_nonneg_f32(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp_f32(p - z * z);
}

// Standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2: the vectorizable form for f32, erf for f64.
template <class T>
T normal_cdf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const float z = x * -float(kSqrt1_2);
    const float e = erfc_nonneg_f32(std::fabs(z));
    return 0.5f * (z >= 0.0f ? e : 2.0f - e);
  } else {
    return T(0.5) * (T(1) + std::erf(x * T(kSqrt1_2)));
  }
}

// out = f(x). Float: f32/f64 only; otherwise the numeric dtypes.
template <bool Float, class F>
Tensor unary(const char* op, const Tensor& x, F f) {
  check_cpu(op, {&x});
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T>(out, {x}, [f](T v) { return static_cast<T>(f(v)); });
  };
  if constexpr (Float)
    dispatch_float(x.dtype(), op, body);
  else
    dispatch_numeric(x.dtype(), op, body);
  return out;
}

// out = f(grad, y) for a backward kernel: grad and y (the saved input or output) share shape.
template <class F>
Tensor backward_map(const char* op, const Tensor& grad, const Tensor& y, F f) {
  check_same_device(op, {&grad, &y});
  check_same_dtype(op, grad, "grad", y, "saved tensor");
  const Shape shape = broadcast_shapes(grad.shape(), y.shape(), op);
  Tensor out = empty(shape, {.dtype = grad.dtype()});
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T, T>(out, {grad, y}, [f](T g, T v) { return static_cast<T>(f(g, v)); });
  });
  return out;
}

template <class T>
T abs_value(T v) {
  if constexpr (std::is_unsigned_v<T>)
    return v;
  else if constexpr (std::is_floating_point_v<T>)
    return std::fabs(v);
  else
    return v < T(0) ? T(-v) : v;
}

template <class T>
T sign_value(T v) {
  return static_cast<T>((T(0) < v) - (v < T(0)));
}

template <class T>
T gelu_exact(T x) {
  return x * normal_cdf(x);
}
template <class T>
T gelu_tanh(T x) {
  const T inner = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}

void check_bounds(const char* op, std::optional<double> lo, std::optional<double> hi) {
  STOKE_CHECK(lo || hi, op, "expected at least one of min and max, got neither");
}

// The device's kernels for a backward map (null on the CPU), after the checks every device
// shares, in backward_map's order.
Backend* backward_dispatch(const char* op, const Tensor& grad, const Tensor& y) {
  Backend* k = device_dispatch(op, {&grad, &y});
  if (k) {
    check_same_dtype(op, grad, "grad", y, "saved tensor");
    broadcast_shapes(grad.shape(), y.shape(), op);
  }
  return k;
}

// Clamps t's values into out (out may be t) with the bounds present.
void clamp_into(const char* op, const Tensor& out, const Tensor& x, std::optional<double> lo,
                std::optional<double> hi) {
  check_bounds(op, lo, hi);
  dispatch_numeric(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Written as x < lo ? lo : x so that NaN passes through, like torch.clamp.
    if (lo && hi) {
      const T l = scalar_as<T>(*lo, op), h = scalar_as<T>(*hi, op);
      map<T, T>(out, {x}, [l, h](T v) {
        const T m = v < l ? l : v;
        return m > h ? h : m;
      });
    } else if (lo) {
      const T l = scalar_as<T>(*lo, op);
      map<T, T>(out, {x}, [l](T v) { return v < l ? l : v; });
    } else {
      const T h = scalar_as<T>(*hi, op);
      map<T, T>(out, {x}, [h](T v) { return v > h ? h : v; });
    }
  });
}

}  // namespace

// --- forward ----------------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  if (auto* k = device_dispatch("neg", {&x})) return k->unary(UnaryOp::neg, x);
  return unary<false>("neg", x, [](auto v) { return -v; });
}
Tensor exp(const Tensor& x) {
  if (auto* k = device_dispatch("exp", {&x})) return k->unary(UnaryOp::exp, x);
  return unary<true>("exp", x, [](auto v) { return exp_value(v); });
}
Tensor log(const Tensor& x) {
  if (auto* k = device_dispatch("log", {&x})) return k->unary(UnaryOp::log, x);
  return unary<true>("log", x, [](auto v) { return std::log(v); });
}
Tensor sqrt(const Tensor& x) {
  if (auto* k = device_dispatch("sqrt", {&x})) return k->unary(UnaryOp::sqrt, x);
  return unary<true>("sqrt", x, [](auto v) { return std::sqrt(v); });
}
Tensor rsqrt(const Tensor& x) {
  if (auto* k = device_dispatch("rsqrt", {&x})) return k->unary(UnaryOp::rsqrt, x);
  return unary<true>("rsqrt", x, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
}
Tensor abs(const Tensor& x) {
  if (auto* k = device_dispatch("abs", {&x})) return k->unary(UnaryOp::abs, x);
  return unary<false>("abs", x, [](auto v) { return abs_value(v); });
}
Tensor relu(const Tensor& x) {
  if (auto* k = device_dispatch("relu", {&x})) return k->unary(UnaryOp::relu, x);
  // v < 0 ? 0 : v keeps NaN, like torch.relu.
  return unary<false>("relu", x, [](auto v) { return v < decltype(v)(0) ? decltype(v)(0) : v; });
}
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  if (auto* k = device_dispatch("leaky_relu", {&x})) return k->leaky_relu(x, negative_slope);
  return unary<true>("leaky_relu", x, [negative_slope](auto v) {
    using T = decltype(v);
    return v > T(0) ? v : T(v * T(negative_slope));
  });
}
Tensor sigmoid(const Tensor& x) {
  if (auto* k = device_dispatch("sigmoid", {&x})) return k->unary(UnaryOp::sigmoid, x);
  return unary<true>("sigmoid", x, [](auto v) {
    using T = decltype(v);
    return T(1) / (T(1) + exp_value(-v));
  });
}
Tensor tanh(const Tensor& x) {
  if (auto* k = device_dispatch("tanh", {&x})) return k->unary(UnaryOp::tanh, x);
  return unary<true>("tanh", x, [](auto v) { return std::tanh(v); });
}
Tensor silu(const Tensor& x) {
  if (auto* k = device_dispatch("silu", {&x})) return k->unary(UnaryOp::silu, x);
  return unary<true>("silu", x, [](auto v) {
    using T = decltype(v);
    return v / (T(1) + exp_value(-v));
  });
}
Tensor hardswish(const Tensor& x) {
  if (auto* k = device_dispatch("hardswish", {&x})) return k->unary(UnaryOp::hardswish, x);
  return unary<true>("hardswish", x, [](auto v) {
    using T = decltype(v);
    const T r = v + T(3) < T(0) ? T(0) : v + T(3);
    return v * (r > T(6) ? T(6) : r) / T(6);
  });
}
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  if (auto* k = device_dispatch("gelu", {&x}))
    return k->unary(approximate == GeluApproximate::tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu, x);
  if (approximate == GeluApproximate::tanh)
    return unary<true>("gelu", x, [](auto v) { return gelu_tanh(v); });
  return unary<true>("gelu", x, [](auto v) { return gelu_exact(v); });
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_bounds("clamp", min, max);
  if (auto* k = device_dispatch("clamp", {&x})) return k->clamp(x, min, max);
  check_cpu("clamp", {&x});
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  clamp_into("clamp", out, x, min, max);
  return out;
}
Tensor sign(const Tensor& x) {
  if (auto* k = device_dispatch("sign", {&x})) return k->unary(UnaryOp::sign, x);
  return unary<false>("sign", x, [](auto v) { return sign_value(v); });
}
Tensor pow(const Tensor& x, double exponent) {
  if (auto* k = device_dispatch("pow", {&x})) return k->pow(x, exponent);
  // Common exponents get exact, vectorizable forms.
  if (exponent == 2) return unary<true>("pow", x, [](auto v) { return v * v; });
  if (exponent == 1) return unary<true>("pow", x, [](auto v) { return v; });
  if (exponent == 0.5) return unary<true>("pow", x, [](auto v) { return std::sqrt(v); });
  return unary<true>("pow", x, [exponent](auto v) { return std::pow(v, decltype(v)(exponent)); });
}

// --- in place ---------------------------------------------------------------------------------

Tensor sqrt_(const Tensor& t) {
  auto* k = device_dispatch("sqrt_", {&t});
  check_inplace_target("sqrt_", t);
  if (k) {
    k->sqrt_(t);
    return t;
  }
  dispatch_float(t.dtype(), "sqrt_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T>(t, {t}, [](T v) { return std::sqrt(v); });
  });
  return t;
}

Tensor clamp_(const Tensor& t, std::optional<double> min, std::optional<double> max) {
  auto* k = device_dispatch("clamp_", {&t});
  check_inplace_target("clamp_", t);
  if (k) {
    check_bounds("clamp_", min, max);
    k->clamp_(t, min, max);
    return t;
  }
  clamp_into("clamp_", t, t, min, max);
  return t;
}

// --- backward ---------------------------------------------------------------------------------

Tensor relu_backward(const Tensor& grad, const Tensor& out) {
  if (auto* k = backward_dispatch("relu_backward", grad, out)) return k->relu_backward(grad, out);
  return backward_map("relu_backward", grad, out,
                      [](auto g, auto y) { return y > 0 ? g : decltype(g)(0); });
}

Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double negative_slope) {
  if (auto* k = backward_dispatch("leaky_relu_backward", grad, x))
    return k->unary_backward(UnaryGradOp::leaky_relu, grad, x, {.negative_slope = negative_slope});
  return backward_map("leaky_relu_backward", grad, x, [negative_slope](auto g, auto v) {
    using T = decltype(g);
    return v > 0 ? g : T(g * T(negative_slope));
  });
}

Tensor sigmoid_backward(const Tensor& grad, const Tensor& out) {
  if (auto* k = backward_dispatch("sigmoid_backward", grad, out))
    return k->unary_backward(UnaryGradOp::sigmoid, grad, out, {});
  return backward_map("sigmoid_backward", grad, out, [](auto g, auto y) {
    using T = decltype(g);
    return g * y * (T(1) - y);
  });
}

Tensor tanh_backward(const Tensor& grad, const Tensor& out) {
  if (auto* k = backward_dispatch("tanh_backward", grad, out))
    return k->unary_backward(UnaryGradOp::tanh, grad, out, {});
  return backward_map("tanh_backward", grad, out, [](auto g, auto y) {
    using T = decltype(g);
    return g * (T(1) - y * y);
  });
}

Tensor silu_backward(const Tensor& grad, const Tensor& x) {
  if (auto* k = backward_dispatch("silu_backward", grad, x))
    return k->unary_backward(UnaryGradOp::silu, grad, x, {});
  return backward_map("silu_backward", grad, x, [](auto g, auto v) {
    using T = decltype(g);
    const T s = T(1) / (T(1) + exp_value(-v));
    return g * s * (T(1) + v * (T(1) - s));
  });
}

Tensor hardswish_backward(const Tensor& grad, const Tensor& x) {
  if (auto* k = backward_dispatch("hardswish_backward", grad, x))
    return k->unary_backward(UnaryGradOp::hardswish, grad, x, {});
  return backward_map("hardswish_backward", grad, x, [](auto g, auto v) {
    using T = decltype(g);
    return v < T(-3) ? T(0) : v < T(3) ? T(g * (v / T(3) + T(0.5))) : g;
  });
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApproximate approximate) {
  if (auto* k = backward_dispatch("gelu_backward", grad, x))
    return k->unary_backward(
        approximate == GeluApproximate::tanh ? UnaryGradOp::gelu_tanh : UnaryGradOp::gelu, grad, x,
        {});
  if (approximate == GeluApproximate::tanh)
    return backward_map("gelu_backward", grad, x, [](auto g, auto v) {
      using T = decltype(g);
      const T v2 = v * v;
      const T t = std::tanh(T(kSqrt2OverPi) * (v + T(kGeluCoeff) * v2 * v));
      const T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoeff) * v2);
      return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * dinner);
    });
  return backward_map("gelu_backward", grad, x, [](auto g, auto v) {
    using T = decltype(g);
    const T cdf = normal_cdf(v);
    const T pdf = T(kInvSqrt2Pi) * exp_value(T(-0.5) * v * v);
    return g * (cdf + v * pdf);
  });
}

Tensor clamp_backward(const Tensor& grad, const Tensor& x, std::optional<double> min,
                      std::optional<double> max) {
  const double lo = min ? *min : -INFINITY, hi = max ? *max : INFINITY;
  if (auto* k = backward_dispatch("clamp_backward", grad, x))
    return k->unary_backward(UnaryGradOp::clamp, grad, x, {.min = lo, .max = hi});
  return backward_map("clamp_backward", grad, x, [lo, hi](auto g, auto v) {
    using T = decltype(g);
    return (v >= T(lo) && v <= T(hi)) ? g : T(0);
  });
}

Tensor abs_backward(const Tensor& grad, const Tensor& x) {
  if (auto* k = backward_dispatch("abs_backward", grad, x))
    return k->unary_backward(UnaryGradOp::abs, grad, x, {});
  return backward_map("abs_backward", grad, x, [](auto g, auto v) { return g * sign_value(v); });
}

Tensor pow_backward(const Tensor& grad, const Tensor& x, double exponent) {
  if (auto* k = backward_dispatch("pow_backward", grad, x))
    return k->pow_backward(grad, x, exponent);
  if (exponent == 0)
    return backward_map("pow_backward", grad, x, [](auto g, auto) { return decltype(g)(0); });
  if (exponent == 2)
    return backward_map("pow_backward", grad, x, [](auto g, auto v) { return g * (v + v); });
  if (exponent == 1) return backward_map("pow_backward", grad, x, [](auto g, auto) { return g; });
  return backward_map("pow_backward", grad, x, [exponent](auto g, auto v) {
    using T = decltype(g);
    return g * T(exponent) * std::pow(v, T(exponent - 1));
  });
}

Tensor sqrt_backward(const Tensor& grad, const Tensor& out) {
  if (auto* k = backward_dispatch("sqrt_backward", grad, out))
    return k->unary_backward(UnaryGradOp::sqrt, grad, out, {});
  return backward_map("sqrt_backward", grad, out, [](auto g, auto y) { return g / (y + y); });
}

Tensor rsqrt_backward(const Tensor& grad, const Tensor& out) {
  if (auto* k = backward_dispatch("rsqrt_backward", grad, out))
    return k->unary_backward(UnaryGradOp::rsqrt, grad, out, {});
  return backward_map("rsqrt_backward", grad, out, [](auto g, auto y) {
    using T = decltype(g);
    return T(-0.5) * g * y * y * y;
  });
}

}  // namespace stoke::ops
