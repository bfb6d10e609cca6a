// The elementwise losses (l1, smooth L1, KL divergence, binary cross entropy with and without
// logits) and the composite reductions logsumexp and std: forward and both gradients against
// PyTorch's (tests/fixtures/losses.txt, made by make_fixtures.py) in f32 and f64, gradcheck, the
// edge cases torch defines (saturated probabilities, zero targets, rows of -inf), errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/gradcheck.h"
#include "autograd/loss.h"
#include "autograd/reduce.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::FixtureCase;

namespace {

Reduction reduction_named(const std::string& s) {
  return s == "none" ? Reduction::none : s == "sum" ? Reduction::sum : Reduction::mean;
}

KlDivReduction kl_reduction_named(const std::string& s) {
  return s == "none"        ? KlDivReduction::none
         : s == "batchmean" ? KlDivReduction::batchmean
         : s == "sum"       ? KlDivReduction::sum
                            : KlDivReduction::mean;
}

// Elementwise within tol; a non-finite reference value is skipped only where `skip_non_finite`
// (torch's gradient w.r.t. a target where the loss has a log singularity: see the cases).
void check_close(const Tensor& got, const stoke::testing::FixtureTensor& want, double tol,
                 bool skip_non_finite = false, const std::vector<bool>& skip = {}) {
  REQUIRE(got.shape() == Shape(want.shape));
  const std::vector<double> g = got.to(DType::f64).contiguous().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (skip_non_finite && !std::isfinite(want.values[i])) continue;
    if (i < skip.size() && skip[i]) continue;
    INFO("element " << i << ": got " << g[i] << ", want " << want.values[i]);
    REQUIRE(std::isfinite(g[i]));
    CHECK(std::abs(g[i] - want.values[i]) <= tol * (1 + std::abs(want.values[i])));
  }
}

Tensor fixture_loss(const FixtureCase& c, const Tensor& x, const Tensor& t, DType dtype) {
  const std::string fn = c.attr("loss_fn");
  const Reduction r = reduction_named(c.attr("reduction"));
  auto optional = [&](const char* name) {
    return c.has_tensor(name) ? stoke::testing::to_tensor(c.tensor(name), dtype) : Tensor();
  };
  if (fn == "l1_loss") return l1_loss(x, t, r);
  if (fn == "smooth_l1_loss") return smooth_l1_loss(x, t, r, c.attr_double("beta"));
  if (fn == "kl_div")
    return kl_div(x, t,
                  {.reduction = kl_reduction_named(c.attr("reduction")),
                   .log_target = c.attr_int("log_target") != 0});
  if (fn == "binary_cross_entropy")
    return binary_cross_entropy(x, t, {.reduction = r, .weight = optional("weight")});
  REQUIRE(fn == "binary_cross_entropy_with_logits");
  return binary_cross_entropy_with_logits(
      x, t, {.reduction = r, .weight = optional("weight"), .pos_weight = optional("pos_weight")});
}

}  // namespace

TEST_CASE("loss grad: l1, smooth L1, KL divergence and BCE match PyTorch in f32 and f64",
          "[autograd][loss][fixture]") {
  const auto cases = stoke::testing::load_fixture(stoke::testing::fixture_path("losses.txt"));
  int losses = 0;
  for (const FixtureCase& c : cases) {
    if (!c.has_attr("loss_fn")) continue;
    ++losses;
    for (const DType dtype : {DType::f32, DType::f64}) {
      INFO("case " << c.name << " in " << dtype);
      const Tensor x = stoke::testing::to_tensor(c.tensor("input"), dtype).set_requires_grad(true);
      const Tensor t = stoke::testing::to_tensor(c.tensor("target"), dtype).set_requires_grad(true);
      Tensor loss = fixture_loss(c, x, t, dtype);
      // f64: the fixture's rounding of torch's f64 result to f32 (2^-24 relative; 6e-8 covers
      // it and f64's own roundings). f32: each term rounds ~6 times (12 u with its log or exp's
      // 3 ulp), the mean's sum of 20 terms 20 u of the sum of |terms| (~|loss| for these
      // one-signed terms), and KL's t (log t - x) cancels by up to ~10 for these draws:
      // 32 u * 10 = 2e-5 of 1 + |want|.
      const double tol = dtype == DType::f64 ? 6e-8 : 2e-5;
      check_close(loss, c.tensor("loss"), tol);
      loss.backward(stoke::testing::to_tensor(c.tensor("grad_loss"), dtype));
      // At input == target smooth L1 with beta = 0 is |d| at its kink, where any value in
      // [-1, 1] times the incoming gradient is a subgradient: torch's smooth_l1 takes -1, its
      // l1_loss (and stoke for both) 0. Those elements are checked to be 0 instead.
      std::vector<bool> kink;
      if (c.attr("loss_fn") == "smooth_l1_loss" && c.attr_double("beta") == 0) {
        const auto& xs = c.tensor("input").values;
        const auto& ts = c.tensor("target").values;
        const auto gx = x.grad().to(DType::f64).contiguous().to_vector<double>();
        for (size_t i = 0; i < xs.size(); ++i) {
          kink.push_back(xs[i] == ts[i]);
          if (kink.back()) CHECK(gx[i] == 0);
        }
        CHECK(std::count(kink.begin(), kink.end(), true) > 0);
      }
      check_close(x.grad(), c.tensor("grad_input"), tol, false, kink);
      // Where the loss has a log singularity torch's target gradients are not finite: +-inf for
      // BCE at a probability of exactly 0 or 1 (stoke's too), nan for KL at a target of exactly 0
      // (the derivative of t log t; stoke's is finite there). Those elements are left out.
      check_close(t.grad(), c.tensor("grad_target"), tol, /*skip_non_finite=*/true, kink);
    }
  }
  CHECK(losses == 32);
}

TEST_CASE("reduce grad: logsumexp and std over one, several and all dims match PyTorch",
          "[autograd][reduce][fixture]") {
  const auto cases = stoke::testing::load_fixture(stoke::testing::fixture_path("losses.txt"));
  int reductions = 0;
  for (const FixtureCase& c : cases) {
    if (!c.has_attr("op")) continue;
    ++reductions;
    const std::string op = c.attr("op"), dims_attr = c.attr("dims");
    std::vector<int64_t> dims;
    if (dims_attr == "1") dims = {1};
    if (dims_attr == "0,2") dims = {0, 2};
    const bool keepdim = c.attr_int("keepdim") != 0;
    for (const DType dtype : {DType::f32, DType::f64}) {
      INFO("case " << c.name << " in " << dtype);
      const Tensor x = stoke::testing::to_tensor(c.tensor("input"), dtype).set_requires_grad(true);
      Tensor y = op == "logsumexp" ? logsumexp(x, dims, keepdim)
                                   : stoke::std(x, dims, op == "std1" ? 1 : 0, keepdim);
      // f64: the fixture's rounding to f32 (6e-8, as above). f32: logsumexp's max, exps (3 ulp)
      // and sum (<= 20 terms: 20 u relative) then log, std's two f64-accumulated passes and
      // sqrt: < 40 u of the result; the gradients (softmax weights, (x - mean) / (n std)) as
      // many: 2e-5 of 1 + |want| leaves the margin of the loss fixtures above.
      const double tol = dtype == DType::f64 ? 6e-8 : 2e-5;
      check_close(y, c.tensor("output"), tol);
      y.backward(stoke::testing::to_tensor(c.tensor("grad_output"), dtype));
      check_close(x.grad(), c.tensor("grad_input"), tol);
    }
  }
  CHECK(reductions == 18);
}

TEST_CASE("loss grad: the elementwise losses and logsumexp pass gradcheck", "[autograd][loss]") {
  Generator g(11);
  const Tensor x = randn({3, 4}, {.dtype = DType::f64}, &g).set_requires_grad(true);
  const Tensor t = randn({3, 4}, {.dtype = DType::f64}, &g).set_requires_grad(true);
  const Tensor p = (rand({3, 4}, {.dtype = DType::f64}, &g) * 0.8 + 0.1).set_requires_grad(true);
  const Tensor w = rand({4}, {.dtype = DType::f64}, &g) + 0.5;
  auto check = [](const char* what, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                  const std::vector<Tensor>& in) {
    INFO(what);
    const auto r = autograd::gradcheck(f, in);
    INFO(r.worst);
    CHECK(r.ok);
  };
  check("l1", [](const auto& v) { return l1_loss(v[0], v[1]); }, {x, t});
  check("smooth_l1", [](const auto& v) { return smooth_l1_loss(v[0], v[1], Reduction::sum, 0.7); },
        {x, t});
  check("kl_div",
        [](const auto& v) { return kl_div(v[0], v[1], {.reduction = KlDivReduction::batchmean}); },
        {log_softmax(x, 1), p});
  check("bce", [&](const auto& v) { return binary_cross_entropy(v[0], v[1], {.weight = w}); },
        {p, t});
  check("bce_with_logits",
        [&](const auto& v) {
          return binary_cross_entropy_with_logits(v[0], v[1], {.weight = w, .pos_weight = w * 2});
        },
        {x, p});
  check("logsumexp", [](const auto& v) { return logsumexp(v[0], {1}); }, {x});
  check("std", [](const auto& v) { return stoke::std(v[0], {0}, 1, true); }, {x});
}

TEST_CASE("loss grad: edge cases as torch defines them", "[autograd][loss]") {
  const double inf = std::numeric_limits<double>::infinity();
  // logsumexp: a row of -inf is -inf, +inf wins, large values do not overflow.
  const Tensor x =
      from_vector<double>({-inf, -inf, 1000, 1000, inf, 0}, {3, 2}, {.dtype = DType::f64});
  const auto y = logsumexp(x, {1}).to_vector<double>();
  CHECK(y[0] == -inf);
  // 1000 + log(e^0 + e^0): the log and the sum round once each in f64 (2 u).
  CHECK(y[1] == Approx(1000 + std::log(2.0)).epsilon(2 * 0x1p-53));
  CHECK(y[2] == inf);
  CHECK(logsumexp(zeros({0, 3}), {0}).to_vector<float>() == std::vector<float>(3, -INFINITY));
  // BCE with logits at logit 0 has the gradient sigmoid(0) - t, from either side's formula.
  const Tensor z = zeros({2}, {.dtype = DType::f64}).set_requires_grad(true);
  binary_cross_entropy_with_logits(z, from_vector<double>({0, 1}, {2}, {.dtype = DType::f64}),
                                   {.reduction = Reduction::sum})
      .backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0.5, -0.5});  // exact: 0.5 - t
  // Saturated logits stay finite: softplus(100) = 100.
  const Tensor big = from_vector<float>({100, -100}, {2});
  const auto l = binary_cross_entropy_with_logits(big, from_vector<float>({0, 1}, {2}),
                                                  {.reduction = Reduction::none})
                     .to_vector<float>();
  // Exact: 100 + log(1 + e^-100), and e^-100 is far below f32's u.
  CHECK(l[0] == 100);
  CHECK(l[1] == 100);
  // f16 inputs are computed in f32 and give an f32 loss.
  CHECK(l1_loss(ones({4}).to(DType::f16), zeros({4}).to(DType::f16)).dtype() == DType::f32);
}

TEST_CASE("loss grad: the elementwise losses name what is wrong", "[autograd][loss]") {
  CHECK_THROWS_WITH(l1_loss(ones({2, 3}), ones({3, 2})),
                    Catch::Contains("l1_loss") && Catch::Contains("same shape"));
  CHECK_THROWS_WITH(smooth_l1_loss(ones({2}), ones({2}), Reduction::mean, -1),
                    Catch::Contains("beta >= 0"));
  CHECK_THROWS_WITH(binary_cross_entropy(full({2}, 1.5), ones({2})),
                    Catch::Contains("binary_cross_entropy") && Catch::Contains("[0, 1]") &&
                        Catch::Contains("with_logits"));
  CHECK_THROWS_WITH(kl_div(ones({2}, {.dtype = DType::i64}), ones({2})),
                    Catch::Contains("kl_div") && Catch::Contains("floating"));
  CHECK_THROWS_WITH(logsumexp(ones({2}, {.dtype = DType::i64})),
                    Catch::Contains("logsumexp") && Catch::Contains("floating"));
}
