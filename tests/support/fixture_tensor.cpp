#include "support/fixture_tensor.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "ops/creation.h"

namespace stoke::testing {

Tensor to_tensor(const FixtureTensor& t, DType dtype) {
  if (t.dtype == "i64") return from_vector(t.as_i64(), Shape(t.shape), {.dtype = DType::i64});
  return from_vector(t.as_f32(), Shape(t.shape), {.dtype = dtype});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  STOKE_CHECK(a.shape() == b.shape(), "max_abs_diff", "shapes differ: ", a.shape(), " and ",
              b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

void check_matches(const Tensor& got, const FixtureTensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == Shape(want.shape));
  const std::vector<double> g = got.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << want.values[i]);
    CHECK(std::abs(g[i] - want.values[i]) <= 1e-5 + 1e-5 * std::abs(want.values[i]));
  }
}

}  // namespace stoke::testing
