#include "support/fixture_tensor.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "ops/creation.h"

namespace stoke::testing {

namespace {

// |a - b| with NaN == NaN and inf == inf; +inf where exactly one is NaN or the infinities differ.
double difference(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INFINITY;
  if (a == b) return 0;  // equal infinities too
  return std::abs(a - b);
}

}  // namespace

Tensor to_tensor(const FixtureTensor& t, DType dtype) {
  if (t.dtype == "i64") return from_vector(t.as_i64(), Shape(t.shape), {.dtype = DType::i64});
  return from_vector(t.as_f32(), Shape(t.shape), {.dtype = dtype});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  STOKE_CHECK(a.shape() == b.shape(), "max_abs_diff", "shapes differ: ", a.shape(), " and ",
              b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, difference(va[i], vb[i]));
  return m;
}

double max_rel_error(const Tensor& got, const Tensor& want, double atol, double rtol) {
  STOKE_CHECK(got.shape() == want.shape(), "max_rel_error", "shapes differ: ", got.shape(), " and ",
              want.shape());
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = difference(g[i], w[i]);
    if (d > 0) worst = std::max(worst, d / (atol + rtol * std::abs(w[i])));
  }
  return worst;
}

double max_bound_ratio(const Tensor& got, const Tensor& want, const Tensor& abs_sum, double factor,
                       double rtol) {
  STOKE_CHECK(got.shape() == want.shape() && got.shape() == abs_sum.shape(), "max_bound_ratio",
              "shapes differ: ", got.shape(), ", ", want.shape(), " and ", abs_sum.shape());
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  const auto a = abs_sum.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = difference(g[i], w[i]);
    if (d > 0) worst = std::max(worst, d / (factor * a[i] + rtol * std::abs(w[i])));
  }
  return worst;
}

double sum_error_factor(int64_t n, DType dtype) {
  return 8 * std::sqrt(static_cast<double>(std::max<int64_t>(n, 1))) * unit_roundoff(dtype);
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 0x1p-24;
    case DType::f64:
      return 0x1p-53;
    case DType::f16:
      return 0x1p-11;
    case DType::bf16:
      return 0x1p-8;
    default:
      STOKE_FAIL("unit_roundoff", dtype, " is not a floating dtype");
  }
}

void check_matches(const Tensor& got, const FixtureTensor& want, const std::string& what,
                   double atol, double rtol) {
  INFO(what);
  REQUIRE(got.shape() == Shape(want.shape));
  const std::vector<double> g = got.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << want.values[i]);
    CHECK(difference(g[i], want.values[i]) <= atol + rtol * std::abs(want.values[i]));
  }
}

}  // namespace stoke::testing
