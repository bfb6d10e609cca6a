#include <catch2/catch.hpp>

#include <tuple>

#include "autograd/linalg.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;

namespace {

Tensor leaf64(const Shape& s) {
  return randn(s, {.dtype = DType::f64}).set_requires_grad(true);
}

void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                const std::vector<Tensor>& inputs) {
  const autograd::GradcheckResult r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
  CHECK(r.checked > 0);
}

auto mm_fn = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };

}  // namespace

TEST_CASE("matmul grad: 2-D, batched and broadcast batch dims", "[autograd][linalg]") {
  check_grad(mm_fn, {leaf64({3, 4}), leaf64({4, 5})});
  check_grad(mm_fn, {leaf64({2, 3, 4}), leaf64({2, 4, 5})});
  check_grad(mm_fn, {leaf64({2, 3, 4}), leaf64({4, 5})});        // b shared across the batch
  check_grad(mm_fn, {leaf64({3, 4}), leaf64({2, 4, 5})});        // a shared across the batch
  check_grad(mm_fn, {leaf64({2, 1, 3, 4}), leaf64({3, 4, 2})});  // both broadcast
  check_grad(mm_fn, {leaf64({1, 3, 4}), leaf64({2, 2, 4, 5})});
}

TEST_CASE("matmul grad: 1-D operands and transposed views", "[autograd][linalg]") {
  check_grad(mm_fn, {leaf64({4}), leaf64({4})});
  check_grad(mm_fn, {leaf64({4}), leaf64({4, 3})});
  check_grad(mm_fn, {leaf64({3, 4}), leaf64({4})});
  check_grad(mm_fn, {leaf64({4}), leaf64({2, 4, 3})});
  check_grad(mm_fn, {leaf64({2, 3, 4}), leaf64({4})});
  // The op sees transposed views of the leaves.
  check_grad([](const std::vector<Tensor>& in) { return matmul(in[0].t(), in[1].transpose(0, 1)); },
             {leaf64({4, 3}), leaf64({5, 4})});
  check_grad([](const std::vector<Tensor>& in) { return matmul(in[0].transpose(1, 2), in[1]); },
             {leaf64({2, 4, 3}), leaf64({4, 2})});
}

TEST_CASE("matmul grad: only the operand that requires grad gets one", "[autograd][linalg]") {
  Tensor a = randn({3, 4}).set_requires_grad(true), b = randn({4, 2});
  Tensor y = matmul(a, b);
  CHECK(y.requires_grad());
  y.backward(ones({3, 2}));
  REQUIRE(a.grad().defined());
  CHECK(a.grad().shape() == Shape{3, 4});
  CHECK_FALSE(b.grad().defined());
  // No graph without an input that requires grad.
  CHECK_FALSE(matmul(randn({2, 2}), randn({2, 2})).requires_grad());
}

TEST_CASE("linear grad: with and without bias, 3-D and 1-D input", "[autograd][linalg]") {
  auto with_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  auto no_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); };
  check_grad(with_bias, {leaf64({5, 4}), leaf64({3, 4}), leaf64({3})});
  check_grad(no_bias, {leaf64({5, 4}), leaf64({3, 4})});
  check_grad(with_bias, {leaf64({2, 3, 4}), leaf64({6, 4}), leaf64({6})});
  check_grad(with_bias, {leaf64({4}), leaf64({2, 4}), leaf64({2})});
  // Non-contiguous input and weight.
  check_grad([](const std::vector<Tensor>& in) { return linear(in[0].t(), in[1].t(), in[2]); },
             {leaf64({4, 5}), leaf64({4, 3}), leaf64({3})});
  // Only some inputs require grad.
  check_grad(with_bias, {randn({5, 4}, {.dtype = DType::f64}), leaf64({3, 4}),
                         randn({3}, {.dtype = DType::f64})});
}

TEST_CASE("linear grad: PyTorch fixtures through backward()", "[autograd][linalg][fixture]") {
  for (const auto& c : testing::load_fixture(testing::fixture_path("linear.txt"))) {
    INFO("case " << c.name);
    auto t = [&](const char* name) {
      const auto& f = c.tensor(name);
      return from_vector(f.as_f32(), Shape(f.shape));
    };
    Tensor x = t("input").set_requires_grad(true), w = t("weight").set_requires_grad(true);
    Tensor b = t("bias").set_requires_grad(true);
    Tensor y = linear(x, w, b);
    y.backward(t("grad_out"));
    // Each element a sum of terms (output: in + 1, grad_input: out, grad_weight and grad_bias:
    // the rows), within testing::sum_error_factor of its sum of |terms| (the magnitudes computed
    // as products of absolute values in f64), plus the fixture's rounding to f32 (u |want|).
    const int64_t in = w.size(1), out = w.size(0);
    const auto a64 = [](const Tensor& v) { return ops::abs(v.detach().to(DType::f64)); };
    const Tensor ax = a64(x).reshape({-1, in}), ag = a64(t("grad_out")).reshape({-1, out});
    const int64_t rows = ax.size(0);
    const std::tuple<Tensor, const char*, Tensor, int64_t> checks[] = {
        {y, "output", ops::matmul(ax, a64(w).t()) + a64(b), in + 1},
        {x.grad(), "grad_input", ops::matmul(ag, a64(w)), out},
        {w.grad(), "grad_weight", ops::matmul(ag.t(), ax), rows},
        {b.grad(), "grad_bias", ops::sum(ag, {0}), rows}};
    for (const auto& [got, name, abs, terms] : checks) {
      INFO(name);
      CHECK(testing::max_bound_ratio(got, t(name), abs.reshape(got.shape()),
                                     testing::sum_error_factor(terms, DType::f32),
                                     testing::unit_roundoff(DType::f32)) <= 1);
    }
  }
}
