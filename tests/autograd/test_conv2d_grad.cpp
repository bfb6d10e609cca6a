#include <catch2/catch.hpp>

#include <tuple>
#include <vector>

#include "autograd/conv2d.h"
#include "stoke/stoke.h"
#include "support/conv_reference.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;

namespace {

Tensor leaf64(const Shape& s) {
  return randn(s, {.dtype = DType::f64}).set_requires_grad(true);
}

void check_conv(const Shape& x, const Shape& w, bool bias, const Conv2dOptions& o) {
  INFO("x " << x << " w " << w << " bias " << bias);
  std::vector<Tensor> in = {leaf64(x), leaf64(w)};
  if (bias) in.push_back(leaf64({w[0]}));
  const autograd::GradcheckResult r = autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), o);
      },
      in);
  INFO(r.worst);
  REQUIRE(r.ok);
}

}  // namespace

TEST_CASE("conv2d grad: stride, padding, dilation", "[autograd][conv]") {
  check_conv({2, 3, 5, 5}, {4, 3, 3, 3}, true, {.padding = {1, 1}});
  check_conv({2, 2, 7, 6}, {3, 2, 3, 2}, true, {.stride = {2, 1}, .padding = {1, 0}});
  check_conv({1, 2, 7, 7}, {2, 2, 3, 3}, true, {.padding = {2, 2}, .dilation = {2, 2}});
  check_conv({2, 2, 8, 7}, {3, 2, 2, 3}, false,
             {.stride = {3, 2}, .padding = {1, 2}, .dilation = {2, 1}});
}

TEST_CASE("conv2d grad: groups, depthwise, 1x1, no bias", "[autograd][conv]") {
  check_conv({2, 4, 5, 5}, {6, 2, 3, 3}, true, {.padding = {1, 1}, .groups = 2});
  check_conv({2, 3, 6, 5}, {3, 1, 3, 3}, true, {.padding = {1, 1}, .groups = 3});
  check_conv({2, 3, 7, 7}, {3, 1, 3, 3}, false,
             {.stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 3});
  check_conv({2, 4, 4, 3}, {5, 4, 1, 1}, true, {});
  check_conv({2, 4, 4, 3}, {6, 2, 1, 1}, false, {.groups = 2});
}

TEST_CASE("conv2d grad: non-contiguous input, partial requires_grad", "[autograd][conv]") {
  const Conv2dOptions o{.padding = {1, 1}};
  auto r = autograd::gradcheck(
      [&](const std::vector<Tensor>& t) {
        return conv2d(t[0].permute({0, 3, 1, 2}), t[1], t[2], o);
      },
      {leaf64({2, 5, 4, 3}), leaf64({2, 3, 3, 3}), leaf64({2})});
  INFO(r.worst);
  REQUIRE(r.ok);
  // Weight only (a frozen input).
  Tensor x = randn({2, 3, 5, 5}, {.dtype = DType::f64});
  auto r2 = autograd::gradcheck(
      [&](const std::vector<Tensor>& t) { return conv2d(x, t[0], Tensor(), o); },
      {leaf64({2, 3, 3, 3})});
  INFO(r2.worst);
  REQUIRE(r2.ok);
  Tensor xi = randn({1, 2, 4, 4}), wi = randn({3, 2, 3, 3}).set_requires_grad(true);
  conv2d(xi, wi, Tensor(), o).backward(ones({1, 3, 4, 4}));
  CHECK(wi.grad().shape() == Shape{3, 2, 3, 3});
  CHECK_FALSE(xi.grad().defined());
}

TEST_CASE("conv2d grad: PyTorch fixtures through backward()", "[autograd][conv][fixture]") {
  for (const auto& c : testing::load_fixture(testing::fixture_path("conv2d.txt"))) {
    INFO("case " << c.name);
    auto t = [&](const char* name) {
      const auto& f = c.tensor(name);
      return from_vector(f.as_f32(), Shape(f.shape));
    };
    const auto s = c.attr_ints("stride"), p = c.attr_ints("padding"), d = c.attr_ints("dilation");
    const Conv2dOptions o{.stride = {s[0], s[1]},
                          .padding = {p[0], p[1]},
                          .dilation = {d[0], d[1]},
                          .groups = c.attr_int("groups")};
    const bool has_bias = c.attr_int("bias") != 0;
    Tensor x = t("input").set_requires_grad(true), w = t("weight").set_requires_grad(true);
    Tensor b = has_bias ? t("bias").set_requires_grad(true) : Tensor();
    Tensor y = conv2d(x, w, b, o);
    y.backward(t("grad_out"));
    // Each element within sum_error_factor of its sum of |terms| (tests/support/conv_reference.h,
    // as in tests/ops/test_conv2d.cpp), plus the fixture's rounding to f32 (u |want|).
    const testing::AbsSums abs = testing::abs_sums(t("grad_out"), x.detach(), w.detach(),
                                                   has_bias ? b.detach() : Tensor(), o);
    const testing::TermCounts n = testing::term_counts(x.shape(), w.shape(), y.shape(), o.groups);
    const double growth = testing::winograd_growth(x.shape(), w.shape(), o);
    std::vector<std::tuple<Tensor, const char*, Tensor, int64_t>> checks = {
        {y, "output", abs.output, n.output},
        {x.grad(), "grad_input", abs.input, n.input},
        {w.grad(), "grad_weight", abs.weight, n.weight}};
    if (has_bias) checks.push_back({b.grad(), "grad_bias", abs.bias, n.weight});
    for (const auto& [got, name, abs_sum, terms] : checks) {
      INFO(name);
      REQUIRE(got.defined());
      CHECK(testing::max_bound_ratio(got, t(name), abs_sum,
                                     growth * testing::sum_error_factor(terms, DType::f32),
                                     testing::unit_roundoff(DType::f32)) <= 1);
    }
  }
}

TEST_CASE("conv_transpose2d: PyTorch fixtures in f32 and f64, forward and every gradient",
          "[autograd][conv][fixture]") {
  const auto cases = testing::load_fixture(testing::fixture_path("conv_transpose2d.txt"));
  REQUIRE(cases.size() == 5);
  for (const auto& c : cases) {
    const auto s = c.attr_ints("stride"), p = c.attr_ints("padding"),
               op = c.attr_ints("output_padding"), d = c.attr_ints("dilation");
    const ConvTranspose2dOptions o{.stride = {s[0], s[1]},
                                   .padding = {p[0], p[1]},
                                   .output_padding = {op[0], op[1]},
                                   .groups = c.attr_int("groups"),
                                   .dilation = {d[0], d[1]}};
    for (const DType dtype : {DType::f32, DType::f64}) {
      INFO("case " << c.name << " in " << dtype);
      auto t = [&](const char* name) {
        const auto& f = c.tensor(name);
        return from_vector(f.as_f32(), Shape(f.shape)).to(dtype);
      };
      const bool has_bias = c.has_tensor("bias");
      Tensor x = t("input").set_requires_grad(true), w = t("weight").set_requires_grad(true);
      Tensor b = has_bias ? t("bias").set_requires_grad(true) : Tensor();
      Tensor y = conv_transpose2d(x, w, b, o);
      y.backward(t("grad_output"));
      // The transposed convolution is the adjoint of conv2d with the same weight: its output is
      // conv2d's input gradient for grad_out = x, its input gradient conv2d's forward of
      // grad_output, its weight gradient conv2d's weight gradient. Each element within
      // sum_error_factor of its sum of |terms| (the naive loops on absolute values), plus the
      // fixture's rounding to f32 (u |want|).
      const ops::Conv2dOptions co{
          .stride = o.stride, .padding = o.padding, .dilation = o.dilation, .groups = o.groups};
      // An unbatched (C, H, W) input is a batch of one for the naive loops.
      const auto batched = [&](const Tensor& v) { return x.dim() == 3 ? v.unsqueeze(0) : v; };
      const Tensor ax = testing::abs64(batched(x.detach())), aw = testing::abs64(w.detach());
      const Tensor ag = testing::abs64(batched(t("grad_output")));
      const testing::NaiveGrads out = testing::naive_conv2d_backward(ax, ag, aw, co);
      const int64_t cin = w.size(0), cout_g = w.size(1), taps = w.size(2) * w.size(3);
      // Terms: an output element adds up to cin / groups * taps products and the bias; an input
      // gradient element cout / groups * taps; a weight or bias gradient element N * H * W of x.
      const int64_t spatial = ax.size(0) * ax.size(2) * ax.size(3);
      std::vector<std::tuple<Tensor, const char*, Tensor, int64_t>> checks = {
          {y, "output",
           has_bias ? out.input + testing::abs64(b.detach()).view({1, -1, 1, 1}) : out.input,
           cin / o.groups * taps + 1},
          {x.grad(), "grad_input", testing::naive_conv2d(ag, aw, Tensor(), co), cout_g * taps},
          {w.grad(), "grad_weight", out.weight, spatial}};
      if (has_bias) checks.push_back({b.grad(), "grad_bias", ops::sum(ag, {0, 2, 3}), spatial});
      const double u = testing::unit_roundoff(DType::f32);
      for (const auto& [got, name, abs_sum, terms] : checks) {
        INFO(name);
        REQUIRE(got.defined());
        REQUIRE(got.shape() == t(name).shape());
        // In f64 torch's own f64 rounding (before the fixture's f32 rounding) counts too: twice.
        const double both = dtype == DType::f64 ? 2 : 1;
        CHECK(testing::max_bound_ratio(got, t(name), abs_sum.reshape(got.shape()),
                                       both * testing::sum_error_factor(terms, dtype), u) <= 1);
      }
    }
  }
}

TEST_CASE("conv_transpose2d: gradcheck, the layer, and errors that name the problem",
          "[autograd][conv]") {
  auto check = [](const Shape& x, const Shape& w, bool bias, const ConvTranspose2dOptions& o) {
    INFO("x " << x << " w " << w << " bias " << bias);
    std::vector<Tensor> in = {leaf64(x), leaf64(w)};
    if (bias) in.push_back(leaf64({w[1] * o.groups}));
    const auto r = autograd::gradcheck(
        [&](const std::vector<Tensor>& t) {
          return conv_transpose2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), o);
        },
        in);
    INFO(r.worst);
    REQUIRE(r.ok);
  };
  check({2, 3, 3, 4}, {3, 2, 3, 3}, true, {});
  check({1, 4, 3, 3}, {4, 1, 3, 2}, true,
        {.stride = {2, 3}, .padding = {1, 0}, .output_padding = {1, 2}, .groups = 2});
  check({2, 2, 3, 3}, {2, 2, 2, 2}, false, {.stride = {2, 2}, .dilation = {2, 1}});

  // The layer: torch's weight layout (in, out/groups, kh, kw) and names.
  nn::ConvTranspose2d up(8, 4, 2, {.stride = {2, 2}});
  CHECK(up.weight.shape() == Shape{8, 4, 2, 2});
  CHECK(up.bias.shape() == Shape{4});
  CHECK(up(randn({3, 8, 7, 7})).shape() == Shape{3, 4, 14, 14});
  CHECK(up(randn({8, 7, 7})).shape() == Shape{4, 14, 14});  // one sample

  CHECK_THROWS_WITH(ops::conv_transpose2d(randn({1, 3, 4, 4}), randn({2, 2, 3, 3}), Tensor()),
                    Catch::Contains("conv_transpose2d") && Catch::Contains("input channels"));
  CHECK_THROWS_WITH(ops::conv_transpose2d(randn({1, 2, 4, 4}), randn({2, 2, 3, 3}), Tensor(),
                                          {.stride = {2, 2}, .output_padding = {2, 0}}),
                    Catch::Contains("output_padding (2, 0) must be smaller than the stride"));
  CHECK_THROWS_WITH(ops::conv_transpose2d(randn({1, 2, 4, 4}), randn({2, 2, 3, 3}), randn({3})),
                    Catch::Contains("expected bias (2)"));
}
