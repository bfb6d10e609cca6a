// Shared by the tests of ops:: on "cuda" tensors (tests/cuda/test_ops_cuda*.cpp): inputs are made
// on the CPU, moved with to(Device::cuda()), and results are compared with the CPU op.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "stoke/stoke.h"

namespace stoke::test {

inline const Device kCuda = Device::cuda();

// Standard-normal values on the CPU, reproducible from `seed`.
inline Tensor rand_cpu(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, {}, &g);
}

// Max |a - b| over all elements, both brought to the CPU as f64 (so i64 and bool compare too).
inline double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const auto y = b.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (!std::isnan(x[i])) m = std::max(m, std::abs(x[i] - y[i]));
  }
  return m;
}

// f32's unit roundoff: a correctly rounded result is within u |x| of the exact x, one ulp is at
// most 2u |x|. The tolerances of the comparisons with the CPU count roundings in units of u (and
// torch's own tolerances where they apply).
inline constexpr double kU = 0x1p-24;

// Max |a - b| / |b| over all elements (b the CPU's result, nonzero), NaN matching NaN and
// infinities matching exactly: the relative error of each element.
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const auto y = b.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i]) || std::isinf(x[i]) || std::isinf(y[i])) {
      if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return INFINITY;
      continue;
    }
    if (x[i] != y[i]) m = std::max(m, std::abs(x[i] - y[i]) / std::abs(y[i]));
  }
  return m;
}

// Two sums of the same K terms in different orders: each is typically within sqrt(K) u sum|x| of
// the exact sum (random rounding errors, each at most u of a partial sum; the worst case is
// K u sum|x|), so the two within twice that: over 4 standard deviations of their difference.
// abs_sum is sum|x| (the largest over the outputs compared).
inline double sum_tol(int64_t k, double abs_sum) {
  return 2 * std::sqrt(static_cast<double>(k)) * kU * abs_sum;
}

// Two sums of the same K products of independent zero-mean values (randn inputs: random signs)
// in different orders: the partial sums are random walks, sum_j S_j^2 ~ K/2 sum x^2, so each
// sum's rounding error has a standard deviation of about u sqrt(K / 6) ||x||_2 and the difference
// of two u sqrt(K / 3) ||x||_2; six of those. sq_sum is sum x^2 (the largest over the outputs).
// Much tighter than sum_tol for long sums (K = 1536: 0.05x).
inline double signed_sum_tol(int64_t k, double sq_sum) {
  return 6 * kU * std::sqrt(static_cast<double>(k) / 3 * sq_sum);
}

// The largest element of |t| (f64): the magnitude a tolerance scales with.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>())
    m = std::max(m, std::abs(v));
  return m;
}

}  // namespace stoke::test
