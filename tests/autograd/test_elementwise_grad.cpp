// gradcheck of every differentiable elementwise function (autograd/elementwise.h) at several
// shapes, with broadcasting, non-contiguous inputs and each op's special parameters.
#include <catch2/catch.hpp>
#include <functional>

#include "autograd/elementwise.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// An f64 leaf with N(0, 1) values, or |N(0, 1)| + 0.5 when `positive` (log, sqrt, division).
Tensor leaf(const Shape& shape, uint64_t seed, bool positive = false) {
  Generator g(seed);
  Tensor t = randn(shape, {.dtype = DType::f64}, &g);
  if (positive) t = ops::add(ops::abs(t), 0.5);
  return t.set_requires_grad(true);
}

// The same values laid out transposed: a non-contiguous leaf of shape `shape` (2-D).
Tensor strided_leaf(const Shape& shape, uint64_t seed, bool positive = false) {
  Tensor t = leaf({shape[1], shape[0]}, seed, positive).detach().t();
  return t.set_requires_grad(true);
}

void require_gradcheck(const Fn& f, const std::vector<Tensor>& inputs) {
  const auto r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
  int64_t n = 0;
  for (const auto& t : inputs) n += t.requires_grad() ? t.numel() : 0;
  REQUIRE(r.checked == n);
}

// A unary function over a set of shapes, contiguous and not.
void check_unary(const std::function<Tensor(const Tensor&)>& f, bool positive = false) {
  const Fn g = [&](const std::vector<Tensor>& in) { return f(in[0]); };
  require_gradcheck(g, {leaf({}, 1, positive)});
  require_gradcheck(g, {leaf({7}, 2, positive)});
  require_gradcheck(g, {leaf({2, 3, 4}, 3, positive)});
  require_gradcheck(g, {strided_leaf({4, 3}, 4, positive)});
  // A view of the leaf as the op's input.
  require_gradcheck([&](const std::vector<Tensor>& in) { return f(in[0].slice(1, 0, 5, 2)); },
                    {leaf({3, 5}, 5, positive)});
}

// A binary function over broadcasting shape pairs, contiguous and not.
void check_binary(const std::function<Tensor(const Tensor&, const Tensor&)>& f,
                  bool positive_b = false) {
  const Fn g = [&](const std::vector<Tensor>& in) { return f(in[0], in[1]); };
  struct Pair {
    Shape a, b;
  };
  uint64_t seed = 10;
  for (const Pair& p :
       {Pair{{3, 4}, {3, 4}}, Pair{{3, 1}, {1, 4}}, Pair{{2, 3, 4}, {4}}, Pair{{4}, {2, 3, 4}},
        Pair{{}, {2, 3}}, Pair{{2, 3}, {}}, Pair{{2, 1, 3}, {4, 1}}}) {
    INFO("shapes " << p.a << " and " << p.b);
    require_gradcheck(g, {leaf(p.a, seed, false), leaf(p.b, seed + 1, positive_b)});
    seed += 2;
  }
  require_gradcheck(g, {strided_leaf({4, 3}, 30), strided_leaf({4, 3}, 31, positive_b)});
  require_gradcheck(g, {strided_leaf({4, 3}, 32), leaf({3}, 33, positive_b)});
  // Only one side requires grad.
  require_gradcheck(g, {leaf({3, 4}, 34), leaf({4}, 35, positive_b).detach()});
  require_gradcheck(g, {leaf({3, 1}, 36).detach(), leaf({3, 4}, 37, positive_b)});
}

}  // namespace

TEST_CASE("elementwise grad: binary ops with broadcasting", "[autograd][elementwise]") {
  check_binary([](const Tensor& a, const Tensor& b) { return add(a, b); });
  check_binary([](const Tensor& a, const Tensor& b) { return sub(a, b); });
  check_binary([](const Tensor& a, const Tensor& b) { return mul(a, b); });
  check_binary([](const Tensor& a, const Tensor& b) { return div(a, b); }, true);
  check_binary([](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  check_binary([](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  // Operators compose into one graph.
  check_binary([](const Tensor& a, const Tensor& b) { return (a * b + a) / b - 2.0 * a; }, true);
}

TEST_CASE("elementwise grad: tensor-scalar ops and pow", "[autograd][elementwise]") {
  check_unary([](const Tensor& x) { return add(x, 1.5); });
  check_unary([](const Tensor& x) { return sub(x, 1.5); });
  check_unary([](const Tensor& x) { return sub(1.5, x); });
  check_unary([](const Tensor& x) { return mul(x, -0.5); });
  check_unary([](const Tensor& x) { return div(x, 4.0); });
  check_unary([](const Tensor& x) { return div(2.0, x); }, true);
  check_unary([](const Tensor& x) { return 3.0 - x * 2.0 + 1.0; });
  check_unary([](const Tensor& x) { return -x; });
  for (double e : {2.0, 3.0, 1.0, 0.0, -1.5}) {
    INFO("exponent " << e);
    check_unary([e](const Tensor& x) { return pow(x, e); }, true);
  }
  check_unary([](const Tensor& x) { return pow(x, 0.5); }, true);
}

TEST_CASE("elementwise grad: unary math and activations", "[autograd][elementwise]") {
  check_unary([](const Tensor& x) { return neg(x); });
  check_unary([](const Tensor& x) { return exp(x); });
  check_unary([](const Tensor& x) { return log(x); }, true);
  check_unary([](const Tensor& x) { return sqrt(x); }, true);
  check_unary([](const Tensor& x) { return rsqrt(x); }, true);
  check_unary([](const Tensor& x) { return abs(x); });
  check_unary([](const Tensor& x) { return relu(x); });
  check_unary([](const Tensor& x) { return leaky_relu(x); });
  check_unary([](const Tensor& x) { return leaky_relu(x, 0.3); });
  check_unary([](const Tensor& x) { return sigmoid(x); });
  check_unary([](const Tensor& x) { return tanh(x); });
  check_unary([](const Tensor& x) { return gelu(x); });
  check_unary([](const Tensor& x) { return gelu(x, GeluApproximate::tanh); });
  check_unary([](const Tensor& x) { return silu(x); });
  check_unary([](const Tensor& x) { return hardswish(mul(x, 2.0)); });  // across both kinks
  check_unary([](const Tensor& x) { return clamp(x, -0.5, 0.7); });
  check_unary([](const Tensor& x) { return clamp(x, -0.2, std::nullopt); });
  check_unary([](const Tensor& x) { return clamp(x, std::nullopt, 0.1); });
  check_unary([](const Tensor& x) { return sign(x) * x; });
}

TEST_CASE("elementwise grad: where broadcasts and routes the gradient", "[autograd][elementwise]") {
  const Tensor cond = ops::gt(leaf({3, 1}, 40).detach(), 0.0);
  require_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); },
                    {leaf({1, 4}, 41), leaf({2, 1, 1}, 42)});
  require_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); },
                    {strided_leaf({3, 4}, 43), leaf({}, 44)});
  const Tensor a = ones({3}, {.dtype = DType::f64, .requires_grad = true});
  const Tensor b = zeros({3}, {.dtype = DType::f64, .requires_grad = true});
  const Tensor c = from_vector<int>({1, 0, 1}, {3}, {.dtype = DType::boolean});
  where(c, a, b).backward(ones({3}, {.dtype = DType::f64}));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 0, 1});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0, 1, 0});
}

TEST_CASE("elementwise grad: special points match torch", "[autograd][elementwise]") {
  auto grad_of = [](const std::function<Tensor(const Tensor&)>& f, std::vector<double> v) {
    Tensor x = from_vector<double>(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::f64});
    x.set_requires_grad(true);
    Tensor y = f(x);
    y.backward(ones(y.shape(), {.dtype = DType::f64}));
    return x.grad().to_vector<double>();
  };
  // maximum/minimum split the gradient evenly on ties, like torch.
  const Tensor other = full({3}, 1.0, {.dtype = DType::f64});
  CHECK(grad_of([&](const Tensor& x) { return maximum(x, other); }, {0, 1, 2}) ==
        std::vector<double>{0, 0.5, 1});
  CHECK(grad_of([&](const Tensor& x) { return minimum(x, other); }, {0, 1, 2}) ==
        std::vector<double>{1, 0.5, 0});
  // clamp passes the gradient at its bounds (min <= x <= max), relu and abs give 0 at 0.
  CHECK(grad_of([](const Tensor& x) { return clamp(x, 0, 1); }, {-1, 0, 1, 2}) ==
        std::vector<double>{0, 1, 1, 0});
  CHECK(grad_of([](const Tensor& x) { return relu(x); }, {-1, 0, 2}) ==
        std::vector<double>{0, 0, 1});
  CHECK(grad_of([](const Tensor& x) { return abs(x); }, {-1, 0, 2}) ==
        std::vector<double>{-1, 0, 1});
  CHECK(grad_of([](const Tensor& x) { return pow(x, 0); }, {0, 2}) == std::vector<double>{0, 0});
  CHECK(grad_of([](const Tensor& x) { return sign(x); }, {-1, 3}) == std::vector<double>{0, 0});
  // Gradients of broadcast inputs have the inputs' shapes and dtypes.
  const Tensor a = zeros({3, 1}, {.dtype = DType::f64, .requires_grad = true});
  const Tensor b = zeros({4}, {.dtype = DType::f64, .requires_grad = true});
  (a + b).backward(ones({3, 4}, {.dtype = DType::f64}));
  CHECK(a.grad().shape() == Shape{3, 1});
  CHECK(a.grad().to_vector<double>() == std::vector<double>{4, 4, 4});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{3, 3, 3, 3});
  // Comparisons and in-place updates record nothing.
  CHECK_FALSE((a > 0.0).requires_grad());
}
