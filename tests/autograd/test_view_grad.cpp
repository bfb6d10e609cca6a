// Gradients through core's view and copy methods (autograd/view_grad.cpp).
#include <catch2/catch.hpp>

#include "stoke/stoke.h"

using namespace stoke;

namespace {
Tensor f64_input(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, {.dtype = DType::f64}, &g).set_requires_grad(true);
}

void require_gradcheck(const std::function<Tensor(const Tensor&)>& f, const Tensor& x,
                       const autograd::GradcheckOptions& options = {}) {
  const auto r =
      autograd::gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}, options);
  INFO(r.worst);
  REQUIRE(r.ok);
  REQUIRE(r.checked == x.numel());
}
}  // namespace

TEST_CASE("view grads: every view kind passes gradcheck", "[autograd][views]") {
  const Tensor x = f64_input({3, 4, 5}, 1);
  require_gradcheck([](const Tensor& t) { return t.transpose(0, 2).contiguous(); }, x);
  require_gradcheck([](const Tensor& t) { return t.permute({2, 0, 1}).clone(); }, x);
  require_gradcheck([](const Tensor& t) { return t.narrow(1, 1, 2).clone(); }, x);
  require_gradcheck([](const Tensor& t) { return t.slice(2, 0, 5, 2).clone(); }, x);
  require_gradcheck([](const Tensor& t) { return t.select(0, 2).clone(); }, x);
  require_gradcheck([](const Tensor& t) { return t.view({12, 5}).t().clone(); }, x);
  require_gradcheck([](const Tensor& t) { return t.transpose(0, 1).reshape({-1}); }, x);
  require_gradcheck([](const Tensor& t) { return t.unsqueeze(1).squeeze(1).flatten(1).clone(); },
                    x);
  // Views of views of a non-contiguous base.
  require_gradcheck(
      [](const Tensor& t) { return t.transpose(1, 2).narrow(0, 1, 2).select(2, 3).clone(); }, x);
  // Casts are differentiable too. Through f32 each value is off by u |x| (6e-8 |x|): a central
  // difference with step eps errs by 2 u (|x| + eps) / (2 eps) = 2.4e-5 for eps = 1e-2 and
  // |x| < 4, within atol 1e-4; rtol stays torch's gradcheck default 1e-3.
  require_gradcheck([](const Tensor& t) { return t.to(DType::f32).to(DType::f64); }, x,
                    {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-3});
}

TEST_CASE("view grads: expand sums the gradient over broadcast positions", "[autograd][views]") {
  const Tensor x = f64_input({3, 1}, 2);
  require_gradcheck([](const Tensor& t) { return t.expand({2, 3, 4}).contiguous(); }, x);
  Tensor y = x.expand({3, 4}).contiguous();
  y.backward(ones({3, 4}, {.dtype = DType::f64}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 4, 4});
}

TEST_CASE(
    "view grads: views of an expanded tensor (reshape, transpose, slice) differentiate as in torch",
    "[autograd][views]") {
  // Each is a view of an aliased base (a stride-0 dim of size > 1); x's gradient is the sum of the
  // view's gradient over every position that reads x's element, whatever the view.
  const Tensor x = f64_input({3, 1}, 3);
  require_gradcheck([](const Tensor& t) { return t.expand({3, 4}).reshape({3, 2, 2}).clone(); }, x);
  require_gradcheck([](const Tensor& t) { return t.expand({3, 4}).transpose(0, 1).clone(); }, x);
  require_gradcheck(
      [](const Tensor& t) {
        return t.expand({2, 3, 4}).slice(2, 1, 4, 2).clone();
      },
      x);
  require_gradcheck(
      [](const Tensor& t) {
        return t.expand({3, 4}).t().expand({2, 4, 3}).clone();
      },
      x);
  // Known values: reshape (3, 4) -> (3, 2, 2) keeps every element, so x[i] gets the sum of row i;
  // a slice of 2 of the 4 columns gives each x[i] the sum of those two.
  Tensor y = x.expand({3, 4}).reshape({3, 2, 2});
  y.backward(arange(0, 12, 1, {.dtype = DType::f64}).reshape({3, 2, 2}));
  CHECK(x.grad().to_vector<double>() ==
        std::vector<double>{0 + 1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9 + 10 + 11});
  const Tensor z = f64_input({3, 1}, 4);
  Tensor w = z.expand({3, 4}).slice(1, 1, 4, 2);
  w.backward(arange(0, 6, 1, {.dtype = DType::f64}).reshape({3, 2}));
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0 + 1, 2 + 3, 4 + 5});
}

TEST_CASE("autograd: leaves, grad_fn, detach and no-grad on views", "[autograd][views]") {
  Tensor x = f64_input({2, 3}, 4);
  CHECK(x.is_leaf());
  Tensor v = x.t();
  CHECK_FALSE(v.is_leaf());
  CHECK(v.grad_fn() != nullptr);
  CHECK(v.requires_grad());
  CHECK_FALSE(x.detach().requires_grad());
  CHECK(x.detach().storage() == x.storage());
  {
    NoGradGuard no_grad;
    CHECK(x.t().grad_fn() == nullptr);
  }
  CHECK_THROWS_WITH(v.set_requires_grad(false), Catch::Contains("only leaf tensors"));
  CHECK_THROWS_WITH(v.clone().backward(), Catch::Contains("one-element outputs, got shape [3, 2]"));
  CHECK_THROWS_WITH(zeros({1}).backward(), Catch::Contains("does not require grad"));
}

TEST_CASE("autograd: gradcheck reports the worst element of a wrong gradient",
          "[autograd][gradcheck]") {
  // A function whose backward is deliberately wrong: the gradient is doubled.
  Tensor x = f64_input({4}, 5);
  auto wrong = [](const std::vector<Tensor>& in) {
    Tensor out = in[0].detach().clone();
    autograd::record(
        "WrongBackward", {in[0]}, {out},
        [](const autograd::GradList& g, const autograd::NeedList&) -> autograd::GradList {
          Tensor twice = g[0].clone();
          double* p = twice.data<double>();
          for (int64_t i = 0; i < twice.numel(); ++i) p[i] *= 2;
          return {twice};
        });
    return out;
  };
  const auto r = autograd::gradcheck(wrong, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.worst.find("input 0 element") != std::string::npos);
  CHECK(r.max_error > 0);
}

TEST_CASE("autograd: backward returning a wrong shape is reported with the node name",
          "[autograd][errors]") {
  Tensor x = f64_input({4}, 6);
  Tensor out = x.detach().clone();
  autograd::record("BadShapeBackward", {x}, {out},
                   [](const autograd::GradList&, const autograd::NeedList&) -> autograd::GradList {
                     return {zeros({5}, {.dtype = DType::f64})};
                   });
  CHECK_THROWS_WITH(out.backward(ones({4}, {.dtype = DType::f64})),
                    Catch::Contains("BadShapeBackward returned a gradient of f64 [5]") &&
                        Catch::Contains("f64 [4]"));
}

TEST_CASE("view grads: f64 gradients through every view are exact, not rounded to f32",
          "[autograd][views]") {
  // 1/3 is not an f32 value: a backward that goes through float gives 0.3333333432674408.
  const double third = 1.0 / 3;
  using View = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, View>> views = {
      {"t", [](const Tensor& t) { return t.flatten(1).t(); }},
      {"transpose", [](const Tensor& t) { return t.transpose(0, 2); }},
      {"permute",
       [](const Tensor& t) {
         return t.permute({2, 0, 1});
       }},
      {"view",
       [](const Tensor& t) {
         return t.view({6, 4});
       }},
      {"reshape", [](const Tensor& t) { return t.reshape({-1}); }},
      {"narrow", [](const Tensor& t) { return t.narrow(2, 1, 3); }},
      {"slice", [](const Tensor& t) { return t.slice(2, 0, 4, 2); }},
      {"select", [](const Tensor& t) { return t.select(1, 2); }},
      {"squeeze/unsqueeze", [](const Tensor& t) { return t.unsqueeze(0).squeeze(0); }},
      {"flatten", [](const Tensor& t) { return t.flatten(); }},
      {"contiguous of a transpose", [](const Tensor& t) { return t.transpose(0, 1).contiguous(); }},
      {"clone", [](const Tensor& t) { return t.clone(); }},
      {"view of a view",
       [](const Tensor& t) { return t.transpose(1, 2).narrow(0, 1, 1).select(2, 1); }},
  };
  for (const auto& [name, view] : views) {
    INFO(name);
    Tensor x = zeros({2, 3, 4}, {.dtype = DType::f64}).set_requires_grad(true);
    const Tensor y = view(x);
    y.backward(full(y.shape(), third, {.dtype = DType::f64}));
    // Every element the view reads gets exactly 1/3, the others 0 (a copy reads them all).
    Tensor mask = zeros({2, 3, 4}, {.dtype = DType::f64});
    Tensor marked = view(mask);
    const bool is_view = marked.storage() == mask.storage();
    (is_view ? marked : mask).copy_(ones({}, {.dtype = DType::f64}));
    const auto g = x.grad().to_vector<double>(), m = mask.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == (m[i] != 0 ? third : 0.0));
  }
  // expand sums in f64: four thirds, as torch computes them (1.3333333333333333).
  Tensor e = zeros({3, 1}, {.dtype = DType::f64}).set_requires_grad(true);
  e.expand({3, 4}).backward(full({3, 4}, third, {.dtype = DType::f64}));
  const double four_thirds = ((third + third) + third) + third;
  CHECK(e.grad().to_vector<double>() == std::vector<double>(3, four_thirds));
  // Overlapping windows (as_strided) accumulate serially, in f64: torch gives 1/3, 2/3, 2/3, 1/3.
  Tensor w = zeros({4}, {.dtype = DType::f64}).set_requires_grad(true);
  w.as_strided({3, 2}, {1, 1}, 0).backward(full({3, 2}, third, {.dtype = DType::f64}));
  CHECK(w.grad().to_vector<double>() ==
        std::vector<double>{third, third + third, third + third, third});
}

TEST_CASE("view grads: f64 layers with a transposed input keep f64 precision",
          "[autograd][views]") {
  // x.t() @ w with a gradient of 1/3: dx[i][j] = sum_k g[j][k] * w[i][k] = (w[i][0] + w[i][1]) / 3.
  // Through f32 the error would be ~1e-8; f64 keeps it at the last bits: two products and a sum
  // of values < 3 round 3 times (BLAS's summation order and FMAs may differ from the closed
  // form's, so a bound rather than bit equality): 3 u * 2.4 = 8e-16 <= 1e-15.
  const double third = 1.0 / 3;
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}, {.dtype = DType::f64});
  x.set_requires_grad(true);
  const Tensor w = from_vector<double>({1, -2, 3, 4, 0, -1}, {3, 2}, {.dtype = DType::f64});
  stoke::matmul(x.t(), w).backward(full({2, 2}, third, {.dtype = DType::f64}));
  const std::vector<double> want = {-1.0 / 3, -1.0 / 3, 7.0 / 3, 7.0 / 3, -1.0 / 3, -1.0 / 3};
  const auto got = x.grad().to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-15);
}
