// pad and interpolate: forward and gradient against PyTorch (tests/fixtures/resize.txt, made by
// make_fixtures.py) in f32 and f64, gradcheck, and the errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "autograd/index_resize.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;

namespace {

void check_close(const Tensor& got, const stoke::testing::FixtureTensor& want, double tol) {
  REQUIRE(got.shape() == Shape(want.shape));
  const std::vector<double> g = got.to(DType::f64).contiguous().to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    bad += !(std::abs(g[i] - want.values[i]) <= tol * (1 + std::abs(want.values[i])));
  CHECK(bad == 0);
}

PadMode pad_mode(const std::string& s) {
  return s == "reflect"     ? PadMode::reflect
         : s == "replicate" ? PadMode::replicate
                            : PadMode::constant;
}

}  // namespace

TEST_CASE("resize grad: pad and interpolate match PyTorch in f32 and f64",
          "[autograd][index][fixture]") {
  const auto cases = testing::load_fixture(testing::fixture_path("resize.txt"));
  REQUIRE(cases.size() == 12);
  for (const auto& c : cases) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      INFO("case " << c.name << " in " << dtype);
      const Tensor x = testing::to_tensor(c.tensor("input"), dtype).set_requires_grad(true);
      Tensor y;
      if (c.attr("op") == "pad") {
        y = pad(x, c.attr_ints("pads"),
                {.mode = pad_mode(c.attr("mode")), .value = c.attr_double("value")});
      } else {
        InterpolateOptions o{.mode = c.attr("mode") == "bilinear" ? InterpolateMode::bilinear
                                                                  : InterpolateMode::nearest,
                             .align_corners = c.attr_int("align_corners") != 0};
        if (c.has_attr("size")) {
          const auto s = c.attr_ints("size");
          o.size = {s[0], s[1]};
        } else {
          o.scale_factor = {c.attr_double("scale_h"), c.attr_double("scale_w")};
        }
        y = interpolate(x, o);
      }
      // f64: the fixture's rounding of torch's f64 result to f32 (2^-24 relative; 6e-8 covers it
      // and f64's own roundings). f32: pad is a selection (exact) and its gradient sums <= 4
      // shares; bilinear's source coordinates (< 6) round ~3 times in f32 (u * 6 * 3 = 1.1e-6
      // into each weight), which weigh 2 values < 3 per axis (2 axes: 1.3e-5 absolute at most,
      // typically a few 1e-6), and its gradient adds such shares: 1e-5 of 1 + |want|. f64
      // bilinear computes its coordinates and weights in f64, as torch's op math does.
      const double tol = dtype == DType::f64 ? 6e-8 : 1e-5;
      check_close(y, c.tensor("output"), tol);
      y.backward(testing::to_tensor(c.tensor("grad_output"), dtype));
      check_close(x.grad(), c.tensor("grad_input"), tol);
    }
  }
}

TEST_CASE("resize grad: pad and interpolate pass gradcheck, and errors name the problem",
          "[autograd][index]") {
  const Tensor x = randn({1, 2, 4, 3}, {.dtype = DType::f64}).set_requires_grad(true);
  auto check = [&](const char* what, const std::function<Tensor(const Tensor&)>& f) {
    INFO(what);
    const auto r = autograd::gradcheck([&](const std::vector<Tensor>& v) { return f(v[0]); }, {x});
    INFO(r.worst);
    CHECK(r.ok);
  };
  check("reflect", [](const Tensor& t) {
    return pad(t, {2, 1, 3, 0}, {.mode = PadMode::reflect});
  });
  check("replicate", [](const Tensor& t) { return pad(t, {1, 3}, {.mode = PadMode::replicate}); });
  check("constant", [](const Tensor& t) { return pad(t, {-1, 2, 1, 1}, {.value = 2}); });
  check("bilinear", [](const Tensor& t) {
    return interpolate(t, {.size = {7, 5}, .mode = InterpolateMode::bilinear});
  });
  check("nearest", [](const Tensor& t) { return interpolate(t, {.scale_factor = {2, 1.5}}); });

  const Tensor y = randn({1, 1, 3, 3});
  CHECK_THROWS_WITH(pad(y, {3, 0}, {.mode = PadMode::reflect}),
                    Catch::Contains("reflect padding (3, 0) must be smaller than dim 3's size 3"));
  CHECK_THROWS_WITH(pad(y, {1, 2, 3}), Catch::Contains("pairs"));
  CHECK_THROWS_WITH(pad(y, {-2, -2}), Catch::Contains("below 0"));
  CHECK_THROWS_WITH(interpolate(y, {}), Catch::Contains("exactly one of size and scale_factor"));
  CHECK_THROWS_WITH(interpolate(randn({3, 3, 3}), {.size = {2, 2}}),
                    Catch::Contains("expected (N, C, H, W)"));
  CHECK_THROWS_WITH(interpolate(y, {.size = {4, 4}, .align_corners = true}),
                    Catch::Contains("bilinear interpolation only"));
  // Reflect padding of 28x28 Fashion-MNIST to 32x32: the values at the new border mirror the
  // row inside the edge.
  const Tensor img = arange(0, 4, 1, {.dtype = DType::f32}).reshape({1, 1, 1, 4});
  CHECK(pad(img, {2, 2}, {.mode = PadMode::reflect}).to_vector<float>() ==
        std::vector<float>{2, 1, 0, 1, 2, 3, 2, 1});  // exact: a selection
}
