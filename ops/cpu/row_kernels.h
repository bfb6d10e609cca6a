// CPU row kernels shared by softmax, cross entropy and the max/min reductions: a vectorizable exp
// (also used by the elementwise activations), row max/min (with NaN detection and arg variants)
// and a lane-parallel row sum, all written so that GCC vectorizes the loops that call them.
// Internal to ops/cpu (the public API is ops/softmax.h, ops/loss.h, ops/reduce.h and
// ops/elementwise.h).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace stoke::ops {

namespace cpu {
// e**x in f32 written in plain arithmetic so that loops calling it vectorize (std::exp stays a
// scalar libm call), in two range variants over one reduction and polynomial (exp_reduced): round
// x / ln2 to n, reduce r = x - n ln2 (two-part ln2), a degree-6 Cephes polynomial for e**r, then
// scale by 2**n. Max relative error below 1.5 ulp; the two give bit-identical results on
// [-87.3, 88].
//
// The reduction: returns e**r and sets t = x / ln2 + 1.5 * 2^23, whose low mantissa bits hold n
// (adding 1.5 * 2^23 rounds to an integer without a rounding-mode call).
inline float exp_reduced(float x, float& t) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  t = x * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}
// n from exp_reduced's t.
inline int32_t exp_exponent(float t) {
  return static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(12582912.0f));
}

// The fast variant, for the softmax and cross-entropy kernels, whose arguments are <= 0 (x - max,
// x - logsumexp): one scaling multiply and no range selects, about 20% faster than vexp_full in
// a vectorized loop; inputs below -87.3 give 0 (no denormals), inputs above 88 are clamped to 88.
inline float vexp(float x) {
  const float lo = -87.3365447f, hi = 88.0f;
  const bool under = x < lo;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  float t;
  const float y = exp_reduced(x, t);
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(exp_exponent(t) + 127) << 23);
  return under ? 0.0f : y * scale;
}

// The full-range variant, for ops::exp and the activations: 2**n applied in two halves so that
// results down into the denormal range and up to FLT_MAX are exact powers; inf, -inf and NaN are
// handled.
inline float vexp_full(float x) {
  constexpr float kHi = 88.72283935546875f;  // ln(FLT_MAX)
  constexpr float kLo = -103.972084045410f;  // below: the result rounds to 0
  const float xc = x < kLo ? kLo : (x > kHi ? kHi : x);
  float t;
  const float y = exp_reduced(xc, t);
  const int32_t ni = exp_exponent(t);
  const int32_t h = ni >> 1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(h + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(ni - h + 127) << 23);
  const float res = y * s1 * s2;
  return x > kHi ? INFINITY : (x < kLo ? 0.0f : res);
}
// f64 keeps the library exp (gradcheck precision).
double vexp(double x);

// Independent accumulators that keep reductions vectorizable without -ffast-math.
constexpr int kLanes = 16;

// 64-byte GCC/Clang vector types: explicit vectors where the auto-vectorizer would need
// -ffast-math (max/min reductions).
template <class T>
struct Vec64;
template <>
struct Vec64<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct Vec64<double> {
  typedef double type __attribute__((vector_size(64)));
};

// Maximum (IsMax) or minimum of p[0, n) (n > 0, f32/f64), skipping NaNs. With CheckNan,
// *maybe_nan says whether a NaN (or an infinity: v - v is NaN for both) may be present.
template <bool IsMax, bool CheckNan, class T>
T row_extreme(const T* p, int64_t n, bool* maybe_nan = nullptr) {
  using V = typename Vec64<T>::type;
  constexpr int64_t L = 64 / sizeof(T);
  T m = p[0], chk = 0;
  int64_t i = 0;
  if (n >= 2 * L) {
    V a, b, ca = {}, cb = {};
    __builtin_memcpy(&a, p, sizeof(V));
    b = a;
    for (; i + 2 * L <= n; i += 2 * L) {
      V x, y;
      __builtin_memcpy(&x, p + i, sizeof(V));
      __builtin_memcpy(&y, p + i + L, sizeof(V));
      if constexpr (IsMax) {
        a = x > a ? x : a;
        b = y > b ? y : b;
      } else {
        a = x < a ? x : a;
        b = y < b ? y : b;
      }
      if constexpr (CheckNan) {
        ca += x - x;
        cb += y - y;
      }
    }
    if constexpr (IsMax)
      a = b > a ? b : a;
    else
      a = b < a ? b : a;
    for (int64_t j = 0; j < L; ++j) {
      m = (IsMax ? a[j] > m : a[j] < m) ? a[j] : m;
      if constexpr (CheckNan) chk += ca[j] + cb[j];
    }
  }
  for (; i < n; ++i) {
    m = (IsMax ? p[i] > m : p[i] < m) ? p[i] : m;
    if constexpr (CheckNan) chk += p[i] - p[i];
  }
  if constexpr (CheckNan) *maybe_nan = chk != chk;
  return m;
}

// Same-width integer vectors, for lane-wise positions.
template <class T>
struct IndexVec64;
template <>
struct IndexVec64<float> {
  typedef int32_t type __attribute__((vector_size(64)));
};
template <>
struct IndexVec64<double> {
  typedef int64_t type __attribute__((vector_size(64)));
};

// Value and position (*index) of the first maximum (IsMax) or minimum of p[0, n), skipping NaNs,
// in one vectorized pass: each lane keeps its first extremum and the lanes are merged by value
// and then position. 0 < n < 2^31. *maybe_nan as in row_extreme.
template <bool IsMax, class T>
T row_arg_extreme(const T* p, int64_t n, int64_t* index, bool* maybe_nan) {
  using V = typename Vec64<T>::type;
  using I = typename IndexVec64<T>::type;
  constexpr int64_t L = 64 / sizeof(T);
  T m = p[0], chk = 0;
  int64_t mi = 0, i = 1;
  if (n >= 2 * L) {
    V a, ca = {};
    I ia, iv;
    __builtin_memcpy(&a, p, sizeof(V));
    ca += a - a;
    for (int64_t j = 0; j < L; ++j)
      ia[j] = static_cast<typename std::remove_reference_t<decltype(ia[0])>>(j);
    iv = ia;
    for (i = L; i + L <= n; i += L) {
      iv += static_cast<int32_t>(L);
      V x;
      __builtin_memcpy(&x, p + i, sizeof(V));
      const auto take = IsMax ? x > a : x < a;
      a = take ? x : a;
      ia = take ? iv : ia;
      ca += x - x;
    }
    m = a[0];
    mi = ia[0];
    chk = ca[0];
    for (int64_t j = 1; j < L; ++j) {
      if ((IsMax ? a[j] > m : a[j] < m) || (a[j] == m && ia[j] < mi)) {
        m = a[j];
        mi = ia[j];
      }
      chk += ca[j];
    }
  }
  for (; i < n; ++i) {
    if (IsMax ? p[i] > m : p[i] < m) {
      m = p[i];
      mi = i;
    }
    chk += p[i] - p[i];
  }
  *index = mi;
  *maybe_nan = chk != chk;
  return m;
}

// Maximum of p[0, n) (n > 0).
template <class T>
T row_max(const T* p, int64_t n) {
  return row_extreme<true, false>(p, n);
}

// sum of f(i) for i < n in kLanes accumulators; f may also store.
template <class T, class F>
T lane_sum(int64_t n, F&& f) {
  T lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += f(i + j);
  T rest = 0;
  for (; i < n; ++i) rest += f(i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) lane[j] += lane[j + w];
  return lane[0] + rest;
}
}  // namespace cpu

}  // namespace stoke::ops
