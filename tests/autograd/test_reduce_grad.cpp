#include <catch2/catch.hpp>

#include <limits>

#include "autograd/reduce.h"
#include "autograd/softmax.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

Tensor leaf(const Shape& shape) {
  Tensor x = randn(shape, {.dtype = DType::f64});
  x.set_requires_grad(true);
  return x;
}

// A leaf whose strides are not contiguous: the transpose of a fresh [b, a] tensor.
Tensor transposed_leaf(int64_t a, int64_t b) {
  Tensor x = randn({b, a}, {.dtype = DType::f64}).t();
  x.set_requires_grad(true);
  return x;
}

void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                       const std::vector<Tensor>& inputs) {
  const auto r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
}

}  // namespace

TEST_CASE("reduce grad: sum and mean over dim sets", "[autograd][reduce]") {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {-1}, {0, 2}, {1, 2}, {2, 0, 1}};
  for (const auto& dims : dim_sets)
    for (bool keepdim : {false, true}) {
      INFO("dims " << Shape(dims) << " keepdim " << keepdim);
      require_gradcheck([&](const auto& v) { return stoke::sum(v[0], dims, keepdim); },
                        {leaf({2, 3, 4})});
      require_gradcheck([&](const auto& v) { return stoke::mean(v[0], dims, keepdim); },
                        {leaf({2, 3, 4})});
    }
  require_gradcheck([](const auto& v) { return stoke::sum(v[0], {0}); }, {transposed_leaf(3, 5)});
  require_gradcheck([](const auto& v) { return stoke::mean(v[0], {1}, true); },
                    {transposed_leaf(3, 5)});
  // Through a view recorded by autograd.
  require_gradcheck([](const auto& v) { return stoke::mean(v[0].slice(1, 0, 4, 2), {0}); },
                    {leaf({3, 4})});
}

TEST_CASE("reduce grad: var with both corrections", "[autograd][reduce]") {
  for (int64_t correction : {0, 1})
    for (const auto& dims : std::vector<std::vector<int64_t>>{{}, {1}, {0, 2}, {-1}}) {
      INFO("dims " << Shape(dims) << " correction " << correction);
      require_gradcheck([&](const auto& v) { return stoke::var(v[0], dims, correction, false); },
                        {leaf({3, 4, 2})});
      require_gradcheck([&](const auto& v) { return stoke::var(v[0], dims, correction, true); },
                        {leaf({3, 4, 2})});
    }
  require_gradcheck([](const auto& v) { return stoke::var(v[0], {0}); }, {transposed_leaf(4, 3)});
}

TEST_CASE("reduce grad: max and min route the gradient to the extremum", "[autograd][reduce]") {
  for (int64_t dim : {0, 1, 2, -1})
    for (bool keepdim : {false, true}) {
      INFO("dim " << dim << " keepdim " << keepdim);
      require_gradcheck([&](const auto& v) { return stoke::max(v[0], dim, keepdim); },
                        {leaf({3, 4, 5})});
      require_gradcheck([&](const auto& v) { return stoke::min(v[0], dim, keepdim); },
                        {leaf({3, 4, 5})});
    }
  require_gradcheck([](const auto& v) { return stoke::max(v[0]); }, {leaf({4, 5})});
  require_gradcheck([](const auto& v) { return stoke::min(v[0]); }, {transposed_leaf(4, 5)});
  require_gradcheck([](const auto& v) { return stoke::max(v[0], 1); }, {transposed_leaf(4, 5)});

  // Ties: the whole gradient goes to the first maximum.
  Tensor x = from_vector<double>({1, 3, 3, 2}, {1, 4}, {.dtype = DType::f64});
  x.set_requires_grad(true);
  stoke::sum(stoke::max(x, 1)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
  CHECK(stoke::argmax(from_vector<double>({1, 3, 3, 2}, {4}, {.dtype = DType::f64}), 0)
            .item<int64_t>() == 1);
}

TEST_CASE("reduce grad: max and min over all elements share the gradient among ties, as torch",
          "[autograd][reduce]") {
  // torch.tensor([1., 0, 1, 1]).max() backward gives [1/3, 0, 1/3, 1/3] (the along-a-dim
  // versions send it to the returned index, as above).
  auto grad_of = [](std::vector<double> v, bool is_max, double seed_grad) {
    Tensor x =
        from_vector<double>(v, {2, static_cast<int64_t>(v.size()) / 2}, {.dtype = DType::f64});
    x.set_requires_grad(true);
    Tensor r = is_max ? stoke::max(x.t()) : stoke::min(x.t());
    r.backward(full({}, seed_grad, {.dtype = DType::f64}));
    return x.grad().to_vector<double>();
  };
  CHECK(grad_of({1, 0, 1, 1}, true, 1) == std::vector<double>{1.0 / 3, 0, 1.0 / 3, 1.0 / 3});
  CHECK(grad_of({2, -1, 5, -1}, false, 3) == std::vector<double>{0, 1.5, 0, 1.5});
  CHECK(grad_of({4, 2, 7, 1}, true, 1) == std::vector<double>{0, 0, 1, 0});
  // A NaN is the maximum (torch propagates it) and takes the whole gradient.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(grad_of({1, nan, 9, 2}, true, 1) == std::vector<double>{0, 1, 0, 0});
  // f32 ties split too.
  Tensor y = from_vector<float>({3, 3}, {2});
  y.set_requires_grad(true);
  stoke::max(y).backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{0.5f, 0.5f});
}

TEST_CASE("reduce grad: backward fills leaf grads with the input's shape", "[autograd][reduce]") {
  Tensor x = zeros({2, 3});
  x.set_requires_grad(true);
  stoke::mean(stoke::sum(x, {1}, true)).backward();
  CHECK(x.grad().shape() == Shape{2, 3});
  CHECK(x.grad().to_vector<float>() == std::vector<float>(6, 0.5f));
  // Integer sums record nothing.
  CHECK_FALSE(stoke::sum(arange(0, 4, 1, {.dtype = DType::i64})).requires_grad());
}

TEST_CASE("softmax grad: softmax and log_softmax over dims", "[autograd][softmax]") {
  for (int64_t dim : {0, 1, -1}) {
    INFO("dim " << dim);
    require_gradcheck([&](const auto& v) { return stoke::softmax(v[0], dim); }, {leaf({3, 4, 5})});
    require_gradcheck([&](const auto& v) { return stoke::log_softmax(v[0], dim); },
                      {leaf({3, 4, 5})});
    require_gradcheck([&](const auto& v) { return stoke::softmax(v[0], dim); },
                      {transposed_leaf(4, 6)});
    require_gradcheck([&](const auto& v) { return stoke::log_softmax(v[0], dim); },
                      {transposed_leaf(4, 6)});
  }
  // Composed with a reduction (gradients flow through both nodes).
  require_gradcheck([](const auto& v) { return stoke::sum(stoke::log_softmax(v[0], 1), {0}); },
                    {leaf({3, 5})});
}

TEST_CASE("reduce grad: topk values, indices, gradient and errors", "[autograd][reduce]") {
  const Tensor x =
      from_vector<double>({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {2, 6}, {.dtype = DType::f64})
          .set_requires_grad(true);
  const auto top = topk(x, 3);
  CHECK(top.indices.to_vector<int64_t>() == std::vector<int64_t>{5, 4, 2, 5, 1, 2});
  CHECK(top.values.to_vector<double>() == std::vector<double>{9, 5, 4, 8, 6, 5});
  // Ties keep index order: row 1 has 5 at 2 and 4.
  CHECK(topk(x, 5).indices.to_vector<int64_t>()[7] == 2);
  CHECK(topk(x, 5).indices.to_vector<int64_t>()[8] == 4);
  const auto low = topk(x, 2, {.dim = 0, .largest = false});
  CHECK(low.values.shape() == Shape{2, 6});
  CHECK(low.values.to_vector<double>() == std::vector<double>{2, 1, 4, 1, 5, 8, 3, 6, 5, 3, 5, 9});
  sum(top.values * from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::f64}))
      .backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 3, 0, 2, 1, 0, 5, 6, 0, 0, 4});
  CHECK(topk(x, 0).values.shape() == Shape{2, 0});
  CHECK_THROWS_WITH(topk(x, 7), Catch::Contains("k = 7 must be in [0, 6]"));
  CHECK_THROWS_WITH(topk(x, 1, {.dim = 2}), Catch::Contains("dim 2 is out of range"));
}
