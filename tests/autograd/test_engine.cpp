// Autograd engine behaviour exercised through the elementwise ops: accumulation over a diamond,
// retain_graph, NoGradGuard, detach, hooks on leaves and non-leaves, post-accumulate hooks and
// gradient accumulation across backward calls.
#include <catch2/catch.hpp>

#include "autograd/elementwise.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {
Tensor vec(const std::vector<double>& v, bool requires_grad = true) {
  Tensor t = from_vector<double>(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::f64});
  return requires_grad ? t.set_requires_grad(true) : t;
}
Tensor ones3() {
  return ones({3}, {.dtype = DType::f64});
}
std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}
}  // namespace

TEST_CASE("engine: a diamond graph accumulates both paths", "[autograd][engine]") {
  const Tensor x = vec({1, 2, -3});
  const Tensor y = x * x + x;  // dy/dx = 2x + 1
  y.backward(ones3());
  CHECK(values(x.grad()) == std::vector<double>{3, 5, -5});
  // A deeper diamond: h feeds two branches that meet again.
  const Tensor z = vec({0.5, 1, 2});
  const Tensor h = exp(z);
  const Tensor out = h * sigmoid(h) + h;
  out.backward(ones3());
  const auto zv = values(z.detach());
  for (int i = 0; i < 3; ++i) {
    const double hv = std::exp(zv[i]), s = 1 / (1 + std::exp(-hv));
    // f64 on both sides through libm's exp (within 2 ulp) and ~10 roundings of values < 30:
    // 1e-14 relative.
    CHECK(values(z.grad())[i] == Approx((s + hv * s * (1 - s) + 1) * hv).epsilon(1e-14));
  }
}

TEST_CASE("engine: retain_graph", "[autograd][engine]") {
  const Tensor x = vec({1, 2, 3});
  const Tensor y = x * x;
  y.backward(ones3(), /*retain_graph=*/true);
  y.backward(ones3());  // allowed: the graph was retained; frees it now
  CHECK(values(x.grad()) == std::vector<double>{4, 8, 12});
  CHECK_THROWS_WITH(y.backward(ones3()), Catch::Contains("retain_graph"));
}

TEST_CASE("engine: NoGradGuard records nothing", "[autograd][engine]") {
  const Tensor x = vec({1, 2, 3});
  {
    NoGradGuard no_grad;
    const Tensor y = relu(x * 2.0 + x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(values(y) == std::vector<double>{3, 6, 9});
  }
  CHECK((x * 2.0).requires_grad());
  CHECK((x * 2.0).grad_fn() != nullptr);
}

TEST_CASE("engine: detach cuts the graph", "[autograd][engine]") {
  const Tensor x = vec({1, 2, 3});
  const Tensor d = (x * 3.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  const Tensor y = x.detach() * x;  // only the second factor carries gradient
  y.backward(ones3());
  CHECK(values(x.grad()) == std::vector<double>{1, 2, 3});
}

TEST_CASE("engine: hooks on non-leaves and leaves modify the gradient", "[autograd][engine]") {
  const Tensor x = vec({1, 2, 3});
  const Tensor h = x * 2.0;
  h.register_hook([](const Tensor& g) { return ops::mul(g, 10.0); });
  (h * 1.0).backward(ones3());
  CHECK(values(x.grad()) == std::vector<double>{20, 20, 20});

  const Tensor w = vec({1, 2, 3});
  int calls = 0;
  w.register_hook([&](const Tensor& g) {
    ++calls;
    return ops::mul(g, 3.0);
  });
  (w * w).backward(ones3());  // both paths are summed before the leaf hook runs once
  CHECK(calls == 1);
  CHECK(values(w.grad()) == std::vector<double>{6, 12, 18});
  // A hook returning an undefined tensor keeps the gradient.
  const Tensor v = vec({1, 1, 1});
  v.register_hook([](const Tensor&) { return Tensor(); });
  (v * 4.0).backward(ones3());
  CHECK(values(v.grad()) == std::vector<double>{4, 4, 4});
}

TEST_CASE("engine: a hook on a non-leaf fires after the tensor itself is gone, as in torch",
          "[autograd][engine]") {
  // A layer's output that only the next layer's saved (detached) copy outlives: the hook belongs
  // to the graph (ZeRO-3 regathers a module's parameters from one on its output).
  const Tensor x = vec({1, 2, 3});
  int calls = 0;
  Tensor y;
  {
    const Tensor h = x * 2.0;
    h.register_hook([&](const Tensor& g) {
      ++calls;
      return ops::mul(g, 10.0);
    });
    y = h * h;  // saves h detached: h's own handle dies at the brace
  }
  y.backward(ones3());
  CHECK(calls == 1);
  // d(h^2)/dx = 2 h * 2 with h = 2x, times the hook's 10
  CHECK(values(x.grad()) == std::vector<double>{80, 160, 240});
  // A backward with retain_graph and the one after it each run the hook.
  const Tensor a = vec({1, 2, 3});
  calls = 0;
  Tensor z;
  {
    const Tensor h = a * 1.0;
    h.register_hook([&](const Tensor& g) {
      ++calls;
      return g;
    });
    z = h * 3.0;
  }
  z.backward(ones3(), /*retain_graph=*/true);
  z.backward(ones3());
  CHECK(calls == 2);
  CHECK(values(a.grad()) == std::vector<double>{6, 6, 6});
}

TEST_CASE("engine: post-accumulate hooks fire once per backward, after accumulation",
          "[autograd][engine]") {
  const Tensor x = vec({1, 2, 3});
  std::vector<std::vector<double>> seen;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) { seen.push_back(values(t.grad())); });
  (x * x + x).backward(ones3());  // two paths into x, one firing
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{3, 5, 7});
  (x * x + x).backward(ones3());
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<double>{6, 10, 14});  // the accumulated gradient
}

TEST_CASE("engine: gradients accumulate across backward calls", "[autograd][engine]") {
  const Tensor x = vec({1, -2, 3});
  const Tensor b = vec({0.5, 0.5, 0.5});
  (x * b).backward(ones3());
  (x * b).backward(ones3());
  CHECK(values(x.grad()) == std::vector<double>{1, 1, 1});
  CHECK(values(b.grad()) == std::vector<double>{2, -4, 6});
  // Optimizer-style update under NoGradGuard, then clearing the gradient in place.
  {
    NoGradGuard no_grad;
    ops::add_(x, x.grad(), -0.1);
    ops::zero_(x.grad());
  }
  CHECK(values(x.detach()) == std::vector<double>{0.9, -2.1, 2.9});
  CHECK(values(x.grad()) == std::vector<double>{0, 0, 0});
  CHECK_THROWS_WITH(ops::add_(x, x.grad()), Catch::Contains("in-place operation"));
}

TEST_CASE("autograd: nodes are named as torch names its grad_fn", "[autograd]") {
  const Tensor x = randn({3, 4}).set_requires_grad(true);
  const Tensor t = from_vector<int64_t>({0, 1, 3}, {3}, {.dtype = DType::i64});
  CHECK(sum(x).grad_fn()->name() == "SumBackward");
  CHECK(mean(x).grad_fn()->name() == "MeanBackward");
  CHECK(var(x).grad_fn()->name() == "VarBackward");
  CHECK(max(x).grad_fn()->name() == "MaxBackward");
  CHECK(min(x, 1).grad_fn()->name() == "MinBackward");
  CHECK(softmax(x, 1).grad_fn()->name() == "SoftmaxBackward");
  CHECK(log_softmax(x, 1).grad_fn()->name() == "LogSoftmaxBackward");
  CHECK(cross_entropy(x, t).grad_fn()->name() == "CrossEntropyBackward");
  CHECK(nll_loss(x, t).grad_fn()->name() == "NllLossBackward");
  CHECK(mse_loss(x, x.detach()).grad_fn()->name() == "MseLossBackward");
  CHECK(add(x, x).grad_fn()->name() == "AddBackward");
  CHECK(x.t().grad_fn()->name() == "ViewBackward");
}
