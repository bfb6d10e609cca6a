#include <catch2/catch.hpp>

#include "autograd/loss.h"
#include "autograd/reduce.h"
#include "autograd/softmax.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::FixtureCase;

namespace {

Tensor leaf(const Shape& shape) {
  Tensor x = randn(shape, {.dtype = DType::f64});
  x.set_requires_grad(true);
  return x;
}

Tensor targets(const std::vector<int64_t>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::i64});
}

void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                       const std::vector<Tensor>& inputs) {
  const auto r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
}

}  // namespace

TEST_CASE("loss grad: cross_entropy reductions, smoothing, ignore_index", "[autograd][loss]") {
  const Tensor t = targets({0, 3, 2, 1, 3});
  const Tensor t_ignored = targets({0, -100, 2, 1, -100});
  const Tensor t_class = targets({0, 3, 2, 1, 2});
  const std::vector<CrossEntropyOptions> opts = {
      {},
      {.reduction = Reduction::sum},
      {.reduction = Reduction::none},
      {.label_smoothing = 0.1},
      {.reduction = Reduction::sum, .label_smoothing = 0.3},
  };
  for (size_t i = 0; i < opts.size(); ++i) {
    INFO("options " << i);
    require_gradcheck([&](const auto& v) { return cross_entropy(v[0], t, opts[i]); },
                      {leaf({5, 4})});
    require_gradcheck([&](const auto& v) { return cross_entropy(v[0], t_ignored, opts[i]); },
                      {leaf({5, 4})});
  }
  require_gradcheck(
      [&](const auto& v) {
        return cross_entropy(v[0], t_class, {.label_smoothing = 0.2, .ignore_index = 2});
      },
      {leaf({5, 4})});
  // Non-contiguous logits.
  Tensor xt = randn({4, 5}, {.dtype = DType::f64}).t();
  xt.set_requires_grad(true);
  require_gradcheck([&](const auto& v) { return cross_entropy(v[0], t); }, {xt});
}

TEST_CASE("loss grad: cross_entropy equals log_softmax + nll_loss", "[autograd][loss]") {
  const Tensor t = targets({1, 0, -100, 2});
  Tensor a = randn({4, 3}, {.dtype = DType::f64});
  a.set_requires_grad(true);
  Tensor b = a.detach().clone();
  b.set_requires_grad(true);
  const Tensor l1 = cross_entropy(a, t);
  const Tensor l2 = nll_loss(log_softmax(b, 1), t);
  // Two paths in f64 (the fused cross entropy, log_softmax then nll): per row a max, 3 exps, their
  // sum, a log and differences, each within a few ulp of values < 10 (libm's exp and log are
  // within 2 ulp), then a mean of 3 rows: ~20 u of 10 apart = 2e-14 absolute, 1e-13 with margin.
  CHECK(l1.item() == Approx(l2.item()).epsilon(0).margin(1e-13));
  l1.backward();
  l2.backward();
  // The gradients (softmax - one-hot) / 3 in (-1, 1): ~10 roundings each side, 2e-15; 1e-14.
  const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == Approx(gb[i]).epsilon(0).margin(1e-14));
}

TEST_CASE("loss grad: nll_loss", "[autograd][loss]") {
  const Tensor t = targets({2, 0, 1, 2});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    require_gradcheck([&](const auto& v) { return nll_loss(v[0], t, {.reduction = r}); },
                      {leaf({4, 3})});
    require_gradcheck(
        [&](const auto& v) { return nll_loss(v[0], t, {.reduction = r, .ignore_index = 0}); },
        {leaf({4, 3})});
  }
  require_gradcheck([&](const auto& v) { return nll_loss(log_softmax(v[0], 1), t); },
                    {leaf({4, 3})});
}

TEST_CASE("loss grad: mse_loss w.r.t. input and target", "[autograd][loss]") {
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    require_gradcheck([&](const auto& v) { return mse_loss(v[0], v[1], r); },
                      {leaf({3, 4}), leaf({3, 4})});
  }
  // Only the input requires grad; a non-contiguous target.
  const Tensor target = randn({4, 3}, {.dtype = DType::f64}).t();
  require_gradcheck([&](const auto& v) { return mse_loss(v[0], v[1]); }, {leaf({3, 4}), target});
  Tensor x = from_vector<double>({1, 2}, {2}, {.dtype = DType::f64});
  x.set_requires_grad(true);
  mse_loss(x, from_vector<double>({0, 0}, {2}, {.dtype = DType::f64})).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 2});  // exact: 2 (x - 0) / 2
}

namespace {

Reduction reduction_named(const std::string& s) {
  return s == "none" ? Reduction::none : s == "sum" ? Reduction::sum : Reduction::mean;
}

// stoke::cross_entropy / nll_loss of a fixture case, on `input` (f32 or f64).
Tensor fixture_loss(const FixtureCase& c, const Tensor& input, const Tensor& weight) {
  const Tensor target = stoke::testing::to_tensor(c.tensor("target"));
  if (c.attr("loss_fn") == "nll_loss")
    return nll_loss(input, target,
                    {.reduction = reduction_named(c.attr("reduction")),
                     .ignore_index = c.attr_int("ignore_index"),
                     .weight = weight});
  return cross_entropy(input, target,
                       {.reduction = reduction_named(c.attr("reduction")),
                        .label_smoothing = c.attr_double("label_smoothing"),
                        .ignore_index = c.attr_int("ignore_index"),
                        .weight = weight});
}

void check_close(const Tensor& got, const stoke::testing::FixtureTensor& want, double tol) {
  REQUIRE(got.shape() == Shape(want.shape));
  const std::vector<double> g = got.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << want.values[i]);
    CHECK(std::abs(g[i] - want.values[i]) <= tol * (1 + std::abs(want.values[i])));
  }
}

}  // namespace

TEST_CASE("loss grad: dense, one-sample and class-weighted cross_entropy / nll_loss match PyTorch",
          "[autograd][loss][fixture]") {
  const auto cases =
      stoke::testing::load_fixture(stoke::testing::fixture_path("cross_entropy_shapes.txt"));
  REQUIRE(cases.size() == 14);
  for (const FixtureCase& c : cases) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      INFO("case " << c.name << " in " << dtype);
      const Tensor input = stoke::testing::to_tensor(c.tensor("input"), dtype);
      const Tensor weight =
          c.has_tensor("weight") ? stoke::testing::to_tensor(c.tensor("weight"), dtype) : Tensor();
      const Tensor x = input.clone().set_requires_grad(true);
      Tensor loss = fixture_loss(c, x, weight);
      // f64: the fixture's rounding of torch's f64 result to f32 (2^-24; 6e-8 covers it and f64's
      // own roundings). f32: per row a max, exps (3 ulp), their f32 sum (<= 10 classes: 10 u), a
      // log, then a (weighted) mean over the rows (<= 24: 24 u of the sum of |terms|, ~|loss| for
      // these positive terms): ~40 u = 2.4e-6 of 1 + |want|, within 1e-5 (torch's f32 atol).
      const double tol = dtype == DType::f64 ? 6e-8 : 1e-5;
      check_close(loss, c.tensor("loss"), tol);
      loss.backward(stoke::testing::to_tensor(c.tensor("grad_loss"), dtype));
      check_close(x.grad(), c.tensor("grad_input"), tol);
      // The raw forwards take the same shapes (without weights).
      if (!weight.defined()) {
        const Tensor target = stoke::testing::to_tensor(c.tensor("target"));
        const Reduction r = reduction_named(c.attr("reduction"));
        const Tensor raw =
            c.attr("loss_fn") == "nll_loss"
                ? ops::nll_loss(input, target,
                                {.reduction = r, .ignore_index = c.attr_int("ignore_index")})
                : ops::cross_entropy(input, target,
                                     {.reduction = r,
                                      .label_smoothing = c.attr_double("label_smoothing"),
                                      .ignore_index = c.attr_int("ignore_index")});
        check_close(raw, c.tensor("loss"), tol);
      }
    }
  }
}

TEST_CASE("loss grad: dense and weighted losses pass gradcheck", "[autograd][loss]") {
  Generator g(5);
  const Tensor x = randn({2, 4, 3}, {.dtype = DType::f64}, &g).set_requires_grad(true);
  const Tensor t = from_vector<int64_t>({0, 3, -100, 2, 1, 3}, {2, 3}, {.dtype = DType::i64});
  const Tensor w = from_vector<double>({0.5, 2.0, 1.0, 0.25}, {4}, {.dtype = DType::f64});
  for (const Reduction r : {Reduction::mean, Reduction::sum, Reduction::none})
    for (const double eps : {0.0, 0.2}) {
      INFO("reduction " << static_cast<int>(r) << ", label_smoothing " << eps);
      require_gradcheck(
          [&](const std::vector<Tensor>& in) {
            return cross_entropy(in[0], t, {.reduction = r, .label_smoothing = eps, .weight = w});
          },
          {x});
      require_gradcheck(
          [&](const std::vector<Tensor>& in) {
            return cross_entropy(in[0], t, {.reduction = r, .label_smoothing = eps});
          },
          {x});
      require_gradcheck(
          [&](const std::vector<Tensor>& in) {
            return nll_loss(log_softmax(in[0], 1), t, {.reduction = r, .weight = w});
          },
          {x});
    }
}

TEST_CASE("loss grad: weights and dense shapes are checked, naming the loss", "[autograd][loss]") {
  const Tensor x = randn({4, 3});
  const Tensor t = targets({0, 2, 1, 2});
  CHECK_THROWS_WITH(cross_entropy(x, t, {.weight = ones({4})}),
                    Catch::Contains("cross_entropy") &&
                        Catch::Contains("expected weight of shape [3] (one per class)") &&
                        Catch::Contains("[4]"));
  CHECK_THROWS_WITH(cross_entropy(x, t, {.weight = ones({3}, {.dtype = DType::f64})}),
                    Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THROWS_WITH(cross_entropy(x, targets({0, 2, 3, 1}), {.weight = ones({3})}),
                    Catch::Contains("cross_entropy") &&
                        Catch::Contains("target 3 out of range for 3 classes at row 2"));
  CHECK_THROWS_WITH(nll_loss(x, targets({0, -1, 1, 2}), {.weight = ones({3})}),
                    Catch::Contains("nll_loss") && Catch::Contains("target -1 out of range"));
  CHECK_THROWS_WITH(cross_entropy(randn({2, 3, 5}), targets({0, 1})),
                    Catch::Contains("expected target of shape [2, 5]") &&
                        Catch::Contains("(N, C, d1, ...)") &&
                        Catch::Contains("got target of shape [2]"));
  CHECK_THROWS_WITH(cross_entropy(randn({3}), targets({1})),
                    Catch::Contains("0-dim target") && Catch::Contains("one sample"));
  // The fused kernels in ops:: have no weights and say where they are.
  CHECK_THROWS_WITH(ops::cross_entropy(x, t, {.weight = ones({3})}),
                    Catch::Contains("stoke::cross_entropy"));
  CHECK_THROWS_WITH(ops::nll_loss(x, t, {.weight = ones({3})}), Catch::Contains("stoke::nll_loss"));
  // Weights of 1 are the unweighted loss; no gradient reaches the weight.
  Tensor w = ones({3}).set_requires_grad(true);
  const Tensor xl = x.clone().set_requires_grad(true);
  const Tensor weighted = cross_entropy(xl, t, {.label_smoothing = 0.1, .weight = w});
  // Two f32 paths (the weighted loss divides by the sum of weights, 4.0 exactly): each row's loss
  // < 5 from ~10 roundings, the mean of 4 rows: 2 * 14 u * 5 = 8.4e-6 at worst, 1e-5.
  CHECK(std::abs(weighted.item() - cross_entropy(x, t, {.label_smoothing = 0.1}).item()) < 1e-5);
  weighted.backward();
  CHECK_FALSE(w.grad().defined());
}
