// Unary elementwise CPU kernels (math functions and activations) and their backward kernels. The
// entry points (ops/elementwise.cpp) have checked the operands (the backward maps: dtypes agree,
// shapes broadcast; clamp: a bound is given; in place: the target is writable).
#include <cmath>
#include <cstdint>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "core/parallel.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/cpu/row_kernels.h"
#include "ops/creation.h"
#include "ops/elementwise.h"

namespace stoke::ops::cpu {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCoeff = 0.044715;

// e**v: the vectorizable full-range f32 exp (ops/cpu/row_kernels.h), libm for f64 (gradcheck
// precision).
template <class T>
T exp_value(T v) {
  if constexpr (std::is_same_v<T, float>)
    return vexp_full(v);
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
  return t * vexp_full(p - z * z);
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
Tensor unary_kernel(const char* op, const Tensor& x, F f) {
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

// out = f(grad, y) for a backward kernel: grad and y (the saved input or output) broadcast
// together.
template <class F>
Tensor backward_map(const char* op, const Tensor& grad, const Tensor& y, F f) {
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

// hardswish(v) = v * min(max(v + 3, 0), 6) / 6 over n contiguous f32 values. The clamp as
// max/min instructions: GCC keeps `t < 0 ? 0 : t` as a compare and a blend (it may not turn a
// select into max without -ffinite-math-only), which made this map 20% slower than a plain copy
// loop (0.159 against 0.131 ms on 6.4 MB, one thread). max(0, t) and min(6, r), in that operand
// order, return t or r when it is NaN and -0 for t = -0, as the select does. (GCC 12's max/min
// intrinsics start from _mm512_undefined_ps(), which it then reports as maybe uninitialized: a
// false positive, as in transpose.cpp.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
void hardswish_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 three = _mm512_set1_ps(3.0f), six = _mm512_set1_ps(6.0f);
  const __m512 zero = _mm512_setzero_ps(), sixth = _mm512_set1_ps(1.0f / 6.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 r = _mm512_min_ps(six, _mm512_max_ps(zero, _mm512_add_ps(v, three)));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(v, r), sixth));
  }
#elif defined(__AVX__)
  const __m256 three = _mm256_set1_ps(3.0f), six = _mm256_set1_ps(6.0f);
  const __m256 zero = _mm256_setzero_ps(), sixth = _mm256_set1_ps(1.0f / 6.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 r = _mm256_min_ps(six, _mm256_max_ps(zero, _mm256_add_ps(v, three)));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(v, r), sixth));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i], t = v + 3.0f;
    const float r = t < 0.0f ? 0.0f : t;
    y[i] = v * (r > 6.0f ? 6.0f : r) * (1.0f / 6.0f);
  }
}

// grad_in = g * hardswish'(v) over n contiguous f32 values: 0 below -3, g * (v / 3 + 1/2) up to
// 3, g from 3 on (and for NaN v, as the generic map's selects give). Masked moves instead of
// GCC's compare-and-blend chains, as in the forward.
void hardswish_backward_f32(const float* g, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 lo = _mm512_set1_ps(-3.0f), hi = _mm512_set1_ps(3.0f);
  const __m512 third = _mm512_set1_ps(1.0f / 3.0f), half = _mm512_set1_ps(0.5f);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i), gv = _mm512_loadu_ps(g + i);
    const __mmask16 below = _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ);
    const __mmask16 above = _mm512_cmp_ps_mask(v, hi, _CMP_NLT_UQ);  // v >= 3, or NaN
    __m512 r = _mm512_mul_ps(gv, _mm512_add_ps(_mm512_mul_ps(v, third), half));
    r = _mm512_mask_mov_ps(r, above, gv);
    _mm512_storeu_ps(y + i, _mm512_maskz_mov_ps(__mmask16(~below), r));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];
    y[i] = v < -3.0f ? 0.0f : v < 3.0f ? g[i] * (v * (1.0f / 3.0f) + 0.5f) : g[i];
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Clamps t's values into out (out may be t) with the bounds present (one at least).
void clamp_into(const char* op, const Tensor& out, const Tensor& x, std::optional<double> lo,
                std::optional<double> hi) {
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

Tensor CpuBackend::unary(UnaryOp op, const Tensor& x) {
  const char* name = unary_op_name(op);
  switch (op) {
    case UnaryOp::neg:
      return unary_kernel<false>(name, x, [](auto v) { return -v; });
    case UnaryOp::exp:
      return unary_kernel<true>(name, x, [](auto v) { return exp_value(v); });
    case UnaryOp::log:
      return unary_kernel<true>(name, x, [](auto v) { return std::log(v); });
    case UnaryOp::sqrt:
      return unary_kernel<true>(name, x, [](auto v) { return std::sqrt(v); });
    case UnaryOp::rsqrt:
      return unary_kernel<true>(name, x, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
    case UnaryOp::abs:
      return unary_kernel<false>(name, x, [](auto v) { return abs_value(v); });
    case UnaryOp::relu:
      // v < 0 ? 0 : v keeps NaN, like torch.relu.
      return unary_kernel<false>(name, x,
                                 [](auto v) { return v < decltype(v)(0) ? decltype(v)(0) : v; });
    case UnaryOp::sigmoid:
      return unary_kernel<true>(name, x, [](auto v) {
        using T = decltype(v);
        return T(1) / (T(1) + exp_value(-v));
      });
    case UnaryOp::tanh:
      return unary_kernel<true>(name, x, [](auto v) { return std::tanh(v); });
    case UnaryOp::gelu:
      return unary_kernel<true>(name, x, [](auto v) { return gelu_exact(v); });
    case UnaryOp::gelu_tanh:
      return unary_kernel<true>(name, x, [](auto v) { return gelu_tanh(v); });
    case UnaryOp::sign:
      return unary_kernel<false>(name, x, [](auto v) { return sign_value(v); });
    case UnaryOp::silu:
      return unary_kernel<true>(name, x, [](auto v) {
        using T = decltype(v);
        return v / (T(1) + exp_value(-v));
      });
    case UnaryOp::hardswish:
      if (x.dtype() == DType::f32 && x.is_contiguous()) {
        Tensor out = empty(x.shape(), {.dtype = x.dtype()});
        const float* xp = x.data<float>();
        float* yp = out.data<float>();
        parallel_for(0, x.numel(), kElementwiseGrain,
                     [&](int64_t b, int64_t e) { hardswish_f32(xp + b, yp + b, e - b); });
        return out;
      }
      break;
  }
  return unary_kernel<true>(name, x, [](auto v) {
    using T = decltype(v);
    const T r = v + T(3) < T(0) ? T(0) : v + T(3);
    // A multiply by 1/6, not a divide: the divide alone made this memory-bound map 10 % slower
    // (within an ulp of torch's x * clamp(x + 3, 0, 6) / 6).
    return v * (r > T(6) ? T(6) : r) * (T(1) / T(6));
  });
}

Tensor CpuBackend::leaky_relu(const Tensor& x, double negative_slope) {
  return unary_kernel<true>("leaky_relu", x, [negative_slope](auto v) {
    using T = decltype(v);
    return v > T(0) ? v : T(v * T(negative_slope));
  });
}

Tensor CpuBackend::clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  clamp_into("clamp", out, x, min, max);
  return out;
}

Tensor CpuBackend::pow(const Tensor& x, double exponent) {
  // Common exponents get exact, vectorizable forms.
  if (exponent == 2) return unary_kernel<true>("pow", x, [](auto v) { return v * v; });
  if (exponent == 1) return unary_kernel<true>("pow", x, [](auto v) { return v; });
  if (exponent == 0.5) return unary_kernel<true>("pow", x, [](auto v) { return std::sqrt(v); });
  return unary_kernel<true>("pow", x,
                            [exponent](auto v) { return std::pow(v, decltype(v)(exponent)); });
}

// --- in place ---------------------------------------------------------------------------------

void CpuBackend::sqrt_(const Tensor& t) {
  dispatch_float(t.dtype(), "sqrt_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map<T, T>(t, {t}, [](T v) { return std::sqrt(v); });
  });
}

void CpuBackend::clamp_(const Tensor& t, std::optional<double> min, std::optional<double> max) {
  clamp_into("clamp_", t, t, min, max);
}

// --- backward ---------------------------------------------------------------------------------

Tensor CpuBackend::relu_backward(const Tensor& grad, const Tensor& out) {
  return backward_map("relu_backward", grad, out,
                      [](auto g, auto y) { return y > 0 ? g : decltype(g)(0); });
}

Tensor CpuBackend::unary_backward(UnaryGradOp op, const Tensor& grad, const Tensor& saved,
                                  const UnaryGradParams& params) {
  switch (op) {
    case UnaryGradOp::leaky_relu:
      return backward_map("leaky_relu_backward", grad, saved,
                          [negative_slope = params.negative_slope](auto g, auto v) {
                            using T = decltype(g);
                            return v > 0 ? g : T(g * T(negative_slope));
                          });
    case UnaryGradOp::sigmoid:
      return backward_map("sigmoid_backward", grad, saved, [](auto g, auto y) {
        using T = decltype(g);
        return g * y * (T(1) - y);
      });
    case UnaryGradOp::tanh:
      return backward_map("tanh_backward", grad, saved, [](auto g, auto y) {
        using T = decltype(g);
        return g * (T(1) - y * y);
      });
    case UnaryGradOp::silu:
      return backward_map("silu_backward", grad, saved, [](auto g, auto v) {
        using T = decltype(g);
        const T s = T(1) / (T(1) + exp_value(-v));
        return g * s * (T(1) + v * (T(1) - s));
      });
    case UnaryGradOp::hardswish:
      if (grad.dtype() == DType::f32 && saved.dtype() == DType::f32 && grad.is_contiguous() &&
          saved.is_contiguous() && grad.shape() == saved.shape()) {
        Tensor out = empty(grad.shape(), {.dtype = DType::f32});
        const float *gp = grad.data<float>(), *xp = saved.data<float>();
        float* op = out.data<float>();
        parallel_for(0, grad.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
          hardswish_backward_f32(gp + b, xp + b, op + b, e - b);
        });
        return out;
      }
      return backward_map("hardswish_backward", grad, saved, [](auto g, auto v) {
        using T = decltype(g);
        // v * (1/3), not v / 3: as in the forward, the divide dominated a memory-bound map.
        return v < T(-3) ? T(0) : v < T(3) ? T(g * (v * (T(1) / T(3)) + T(0.5))) : g;
      });
    case UnaryGradOp::gelu_tanh:
      return backward_map("gelu_backward", grad, saved, [](auto g, auto v) {
        using T = decltype(g);
        const T v2 = v * v;
        const T t = std::tanh(T(kSqrt2OverPi) * (v + T(kGeluCoeff) * v2 * v));
        const T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoeff) * v2);
        return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * dinner);
      });
    case UnaryGradOp::gelu:
      return backward_map("gelu_backward", grad, saved, [](auto g, auto v) {
        using T = decltype(g);
        const T cdf = normal_cdf(v);
        const T pdf = T(kInvSqrt2Pi) * exp_value(T(-0.5) * v * v);
        return g * (cdf + v * pdf);
      });
    case UnaryGradOp::clamp:
      // Missing bounds arrive as infinities, which always pass.
      return backward_map("clamp_backward", grad, saved,
                          [lo = params.min, hi = params.max](auto g, auto v) {
                            using T = decltype(g);
                            return (v >= T(lo) && v <= T(hi)) ? g : T(0);
                          });
    case UnaryGradOp::abs:
      return backward_map("abs_backward", grad, saved,
                          [](auto g, auto v) { return g * sign_value(v); });
    case UnaryGradOp::sqrt:
      return backward_map("sqrt_backward", grad, saved, [](auto g, auto y) { return g / (y + y); });
    case UnaryGradOp::rsqrt:
      break;
  }
  return backward_map("rsqrt_backward", grad, saved, [](auto g, auto y) {
    using T = decltype(g);
    return T(-0.5) * g * y * y * y;
  });
}

Tensor CpuBackend::pow_backward(const Tensor& grad, const Tensor& x, double exponent) {
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

}  // namespace stoke::ops::cpu
