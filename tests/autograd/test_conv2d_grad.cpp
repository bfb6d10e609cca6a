#include <catch2/catch.hpp>

#include "autograd/conv2d.h"
#include "stoke/stoke.h"
#include "support/fixture.h"

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
    std::vector<std::pair<Tensor, const char*>> checks = {
        {y, "output"}, {x.grad(), "grad_input"}, {w.grad(), "grad_weight"}};
    if (has_bias) checks.push_back({b.grad(), "grad_bias"});
    for (const auto& [got, name] : checks) {
      INFO(name);
      REQUIRE(got.defined());
      const auto gv = got.to_vector<float>(), ev = t(name).to_vector<float>();
      REQUIRE(gv.size() == ev.size());
      int bad = 0;
      for (size_t i = 0; i < gv.size(); ++i)
        bad += std::abs(gv[i] - ev[i]) > 1e-4 + 1e-4 * std::abs(ev[i]);
      CHECK(bad == 0);
    }
  }
}
