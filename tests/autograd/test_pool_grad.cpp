#include <catch2/catch.hpp>

#include "autograd/pool.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

// f64 leaf whose values are distinct and at least 0.01 apart, in a scrambled order: max pooling
// has no ties, and finite differences (step 1e-6) never change which element wins.
Tensor distinct_leaf(const Shape& shape) {
  const int64_t n = shape.numel();
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.01 * double((i * 7919) % n) - 0.005 * double(n);
  return from_vector(v, shape, {.dtype = DType::f64, .requires_grad = true});
}

Tensor leaf(const Shape& shape) {
  return randn(shape, {.dtype = DType::f64}).set_requires_grad(true);
}

void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                       const std::vector<Tensor>& inputs) {
  const auto r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
  REQUIRE(r.checked > 0);
}

}  // namespace

TEST_CASE("pool grad: max_pool2d gradcheck", "[autograd][pool]") {
  // n is prime to 7919 for each shape below, so the scrambled values are all distinct.
  const std::vector<std::pair<Shape, Pool2dOptions>> cases = {
      {{2, 2, 6, 6}, {.kernel_size = {2, 2}}},
      {{1, 2, 7, 5}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {{2, 1, 6, 7}, {.kernel_size = {3, 2}, .stride = {1, 2}, .padding = {1, 0}}},
      {{1, 2, 7, 7}, {.kernel_size = {2, 2}, .stride = {2, 2}, .ceil_mode = true}},
      {{3, 5, 5}, {.kernel_size = {3, 3}, .stride = {1, 1}, .padding = {1, 1}}},
  };
  for (const auto& [shape, o] : cases) {
    INFO("shape " << shape);
    require_gradcheck([o = o](const std::vector<Tensor>& in) { return max_pool2d(in[0], o); },
                      {distinct_leaf(shape)});
  }
  // Non-contiguous input: pool a transposed view.
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return max_pool2d(in[0].transpose(2, 3), {.kernel_size = {2, 2}});
      },
      {distinct_leaf({1, 2, 5, 6})});
}

TEST_CASE("pool grad: avg_pool2d gradcheck, count_include_pad both ways", "[autograd][pool]") {
  for (bool include : {true, false})
    for (bool ceil : {false, true}) {
      INFO("count_include_pad " << include << " ceil_mode " << ceil);
      const Pool2dOptions o{.kernel_size = {3, 3},
                            .stride = {2, 2},
                            .padding = {1, 1},
                            .ceil_mode = ceil,
                            .count_include_pad = include};
      require_gradcheck([o](const std::vector<Tensor>& in) { return avg_pool2d(in[0], o); },
                        {leaf({2, 2, 6, 7})});
    }
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return avg_pool2d(in[0], {.kernel_size = {2, 2}});
      },
      {leaf({2, 3, 6, 8})});
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return avg_pool2d(in[0].transpose(0, 1), {.kernel_size = {2, 3}, .stride = {1, 2}});
      },
      {leaf({3, 2, 5, 7})});
}

TEST_CASE("pool grad: adaptive_avg_pool2d gradcheck, non-divisible sizes", "[autograd][pool]") {
  const std::vector<std::pair<Shape, std::array<int64_t, 2>>> cases = {
      {{2, 2, 7, 7}, {3, 3}}, {{1, 3, 6, 5}, {4, 3}}, {{2, 2, 5, 5}, {1, 1}},
      {{1, 2, 3, 3}, {5, 4}}, {{2, 4, 4}, {3, 2}},
  };
  for (const auto& [shape, out] : cases) {
    INFO("shape " << shape);
    require_gradcheck(
        [out = out](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], out); },
        {leaf(shape)});
  }
}

TEST_CASE("pool grad: graph recording and gradient shapes", "[autograd][pool]") {
  const Tensor x = randn({2, 3, 8, 8});
  CHECK_FALSE(max_pool2d(x, {.kernel_size = {2, 2}}).requires_grad());
  {
    NoGradGuard guard;
    const Tensor xl = randn({2, 3, 8, 8}).set_requires_grad(true);
    CHECK_FALSE(avg_pool2d(xl, {.kernel_size = {2, 2}}).requires_grad());
  }
  const Tensor xl = randn({2, 3, 8, 8}).set_requires_grad(true);
  const Tensor y = max_pool2d(xl, {.kernel_size = {2, 2}});
  CHECK(y.requires_grad());
  y.backward(ones(y.shape()));
  REQUIRE(xl.grad().defined());
  CHECK(xl.grad().shape() == xl.shape());
  CHECK(xl.grad().dtype() == DType::f32);
  // Each 2x2 window routes its gradient to exactly one element.
  double total = 0;
  for (float v : xl.grad().to_vector<float>()) total += v;
  CHECK(total == 2 * 3 * 16);  // exact: a sum of 96 ones
}
