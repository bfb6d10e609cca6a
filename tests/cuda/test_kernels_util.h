// Helpers for the elementwise-family kernel tests (tests/cuda/test_kernels_*.cpp): inputs at
// aligned or misaligned (one element past 16-byte aligned) addresses, the CPU reference in f32
// rounded to the kernel's dtype, and comparisons with dtype-derived tolerances. Kernels run in
// cuda/emu on the CPU tensors' own memory with the null stream.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "cuda/compat.h"
#include "ops/creation.h"

namespace stoke::kernels_test {

// The floating dtypes the CUDA float kernels take.
inline const std::vector<DType> kFloatDtypes = {DType::f32, DType::f16, DType::bf16};

// Calls f(T{}) with the CUDA element type of a floating dtype.
template <class F>
void with_float_type(DType d, F&& f) {
  if (d == DType::f32) f(float{});
  if (d == DType::f16) f(__half{});
  if (d == DType::bf16) f(__nv_bfloat16{});
}

// t's data as the kernel's element type.
template <class T>
T* ptr(const Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// A contiguous tensor of `shape` and `dtype` with values uniform in [lo, hi) (drawn in f32 and
// rounded to dtype). With misaligned, its data starts one element after an aligned address.
inline Tensor input(const Shape& shape, DType dtype, bool misaligned, double lo, double hi,
                    uint64_t seed) {
  Generator g(seed);
  const int64_t n = shape.numel();
  Tensor base = uniform({n + 1}, lo, hi, {}, &g).to(dtype);
  return base.narrow(0, misaligned ? 1 : 0, n).view(shape);
}

// An uninitialized-looking (NaN-filled for floats) contiguous output, aligned or not.
inline Tensor output(const Shape& shape, DType dtype, bool misaligned) {
  const int64_t n = shape.numel();
  Tensor base = is_floating(dtype) ? full({n + 1}, NAN, {.dtype = dtype})
                                   : full({n + 1}, 77, {.dtype = dtype});
  return base.narrow(0, misaligned ? 1 : 0, n).view(shape);
}

// want rounded to dtype and back to f32: what an exact kernel of that dtype stores.
inline Tensor rounded(const Tensor& want, DType dtype) {
  return want.to(dtype).to(DType::f32);
}

struct Tolerance {
  double rtol;
  double atol;
};

// f32's unit roundoff: a correctly rounded result is within u |x| of the exact x.
inline constexpr double kU = 0x1p-24;

// Tolerance of an elementwise map, kernel against the CPU op, stored in `dtype` from f32 math.
// f32: the maps evaluate the same formulas (bit for bit where they are written alike) except for
// their transcendentals and a few rearranged constants; the worst here is gelu, Phi through erfc
// (the CPU's Numerical Recipes fit within 1.2e-7 relative, CUDA's erfcf within 4 ulp = 4.8e-7)
// and ~4 roundings on each side: 1.1e-6, so rtol 2e-6; the others (exp 1.5 ulp against expf's 2,
// powf 1 against 4, tanhf, log) stay under 14u = 8.3e-7. atol for results that cancel (a - b,
// x (1 + t), values near 0): a few u of operands up to 4, 4 x 4u = 1e-6. f16/bf16: two f32
// values that close round to the same or adjacent values of the dtype, one of its ulps apart
// (2^-10, 2^-7 relative); f16's subnormals step by 2^-24 absolute.
inline Tolerance tol(DType dtype) {
  constexpr Tolerance f32{2e-6, 1e-6};
  switch (dtype) {
    case DType::f16:
      return {0x1p-10 + f32.rtol, f32.atol + 0x1p-24};
    case DType::bf16:
      return {0x1p-7 + f32.rtol, f32.atol};
    default:
      return f32;
  }
}

// The relative tolerance of a sum of K terms of one sign, kernel against CPU (other orders):
// each typically within sqrt(K) u of the exact sum relative (random rounding errors; K u at
// worst), twice that for the two: over 4 standard deviations of their difference.
inline double positive_sum_rtol(int64_t k) {
  return 2 * std::sqrt(static_cast<double>(k)) * kU;
}

// Checks got ≈ want elementwise (same shape; NaN matches NaN, infinities match exactly) and
// reports the first mismatch and the count.
inline void require_close(const Tensor& got, const Tensor& want, Tolerance t,
                          const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                    std::abs(g[i] - w[i]) <= t.atol + t.rtol * std::abs(w[i]);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  std::string msg;
  if (bad > 0)
    msg = detail::str_cat("first mismatch at ", first, ": got ", g[static_cast<size_t>(first)],
                          ", want ", w[static_cast<size_t>(first)], " (", bad, " of ", g.size(),
                          " differ)");
  INFO(msg);
  CHECK(bad == 0);
}

// Exact equality of all elements (integer results, copies, masks).
inline void require_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  require_close(got, want, {0, 0}, what);
}

inline const char* dtype_label(DType d) {
  return dtype_name(d);
}

}  // namespace stoke::kernels_test
