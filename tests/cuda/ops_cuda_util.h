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

}  // namespace stoke::test
