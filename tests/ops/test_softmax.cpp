#include <catch2/catch.hpp>

#include <cmath>

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

namespace {}  // namespace

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
      const Tensor yd = ops::softmax(x.to(DType::f64), dim);
      const Tensor ly = ops::log_softmax(x, dim);
      const Tensor lyd = ops::log_softmax(x.to(DType::f64), dim);
      const auto a = y.to_vector<double>(), b = yd.to_vector<double>();
      const auto la = ly.to_vector<double>(), lb = lyd.to_vector<double>();
      double err = 0, lerr = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        err = std::max(err, std::abs(a[i] - b[i]) / (1e-30 + b[i]));
        lerr = std::max(lerr, std::abs(la[i] - lb[i]) / (1 + std::abs(lb[i])));
      }
      CHECK(err < 1e-5);
      CHECK(lerr < 1e-5);
      // Rows sum to one.
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
  CHECK(std::abs(y[0] - 0.7310586f) < 1e-6);
  const auto ly = ops::log_softmax(x, 1).to_vector<float>();
  CHECK(std::abs(ly[2] + 2000.3133f) < 1e-2);
}
