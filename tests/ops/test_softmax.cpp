#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "ops/reduce.h"
#include "ops/softmax.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::check_matches;
using stoke::testing::FixtureCase;
using stoke::testing::FixtureTensor;
using stoke::testing::to_tensor;

namespace {

// Naive softmax and log_softmax along `dim` in f64: the max, the exps, their sum.
std::pair<std::vector<double>, std::vector<double>> naive_softmax(const Tensor& x, int64_t dim) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  const Tensor xt = x.to(DType::f64).transpose(d, -1).contiguous();
  const int64_t n = xt.size(-1), rows = xt.numel() / n;
  const std::vector<double> v = xt.to_vector<double>();
  std::vector<double> y(v.size()), ly(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = v.data() + r * n;
    const double m = *std::max_element(row, row + n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(row[i] - m);
    for (int64_t i = 0; i < n; ++i) {
      y[r * n + i] = std::exp(row[i] - m) / s;
      ly[r * n + i] = row[i] - m - std::log(s);
    }
  }
  // Back to x's layout.
  auto back = [&](const std::vector<double>& t) {
    return from_vector(t, xt.shape(), {.dtype = DType::f64})
        .transpose(d, -1)
        .contiguous()
        .to_vector<double>();
  };
  return {back(y), back(ly)};
}

}  // namespace

TEST_CASE("softmax: matches PyTorch fixtures (forward and backward)", "[ops][softmax]") {
  const auto cases = stoke::testing::load_fixture(stoke::testing::fixture_path("softmax.txt"));
  REQUIRE(cases.size() >= 14);
  for (const FixtureCase& c : cases) {
    INFO("case " << c.name);
    const Tensor x = to_tensor(c.tensor("input"));
    const Tensor gout = to_tensor(c.tensor("grad_out"));
    const int64_t dim = c.attr_int("dim");
    const bool log = c.attr("op") == "log_softmax";
    const Tensor y = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
    // torch's f64 results rounded to f32, within torch's f32 tolerance (check_matches' default:
    // assert_close's atol 1e-5, rtol 1.3e-6).
    check_matches(y, c.tensor("output"), "output");
    const Tensor gx =
        log ? ops::log_softmax_backward(gout, y, dim) : ops::softmax_backward(gout, y, dim);
    check_matches(gx, c.tensor("grad_input"), "grad_input");
    // Same results from a non-contiguous copy of the input.
    const Tensor xt = x.transpose(0, -1).contiguous().transpose(0, -1);
    REQUIRE_FALSE(xt.is_contiguous());
    const Tensor yt = log ? ops::log_softmax(xt, dim) : ops::softmax(xt, dim);
    check_matches(yt, c.tensor("output"), "output (non-contiguous input)");
  }
}

TEST_CASE("softmax: long rows and columns vs f64 reference", "[ops][softmax]") {
  for (const Shape& shape : {Shape{3, 5000}, Shape{700, 3, 300}, Shape{2, 1000}}) {
    for (int64_t dim : {0, 1, -1}) {
      INFO("shape " << shape << " dim " << dim);
      const Tensor x = randn(shape);
      const Tensor y = ops::softmax(x, dim);
      const Tensor ly = ops::log_softmax(x, dim);
      const auto [b, lb] = naive_softmax(x, dim);
      const auto a = y.to_vector<double>(), la = ly.to_vector<double>();
      double err = 0, lerr = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        err = std::max(err, std::abs(a[i] - b[i]) / (1e-30 + b[i]));
        lerr = std::max(lerr, std::abs(la[i] - lb[i]) / (1 + std::abs(lb[i])));
      }
      // Relative error of softmax in f32: exp (3 ulp: 6 u), the sum of n positive terms, the
      // division (u). The sum's chains are up to n = 700 long (the tiled path along dim 0 of
      // (700, 3, 300)); with independent roundings its relative error is <= 8 u sqrt(n / 3) =
      // 7.3e-6 (Hoeffding, partial sums growing linearly): 1e-5 in all. log_softmax: log of that
      // sum (7.3e-6 absolute) and x - lse's rounding (u * 14): 1e-5 of 1 + |value|.
      CHECK(err < 1e-5);
      CHECK(lerr < 1e-5);
      // Rows sum to one: the common factor 1 / sum's 7.3e-6 (above), the exps' errors averaging
      // out, and ops::sum's own rounding (chains of 32: <= 37 u = 2.2e-6 for positive terms).
      const auto s = ops::sum(y, {dim}).to_vector<double>();
      double worst = 0;
      for (double v : s) worst = std::max(worst, std::abs(v - 1));
      CHECK(worst < 1e-5);
    }
  }
  // Extreme logits: no overflow, exact zeros for far-away classes.
  const Tensor x = from_vector<float>({1000, 0, -1000, 999}, {1, 4});
  const auto y = ops::softmax(x, 1).to_vector<float>();
  CHECK(y[2] == 0);
  // 1 / (1 + e^-1) = 0.73105858: a few f32 roundings of values < 1 (~4e-7) and the constant's 7
  // digits (5e-8).
  CHECK(std::abs(y[0] - 0.7310586f) < 1e-6);
  // -1000 - (1000 + log(1 + e^-1)) = -2000.31326: the f32 ulp at 2000 is 1.2e-4, and the
  // difference and the lse each round once: 2.5e-4, plus the constant's 4 decimals (5e-5).
  const auto ly = ops::log_softmax(x, 1).to_vector<float>();
  CHECK(std::abs(ly[2] + 2000.3133f) < 3e-4);
}
