// gradcheck of the differentiable index and shape functions (autograd/index.h), including
// repeated indices (scatter-add) and non-contiguous inputs.
#include <catch2/catch.hpp>
#include <functional>

#include "autograd/index.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, {.dtype = DType::f64}, &g).set_requires_grad(true);
}

Tensor i64(const std::vector<int64_t>& v, const Shape& shape) {
  return from_vector<int64_t>(v, shape, {.dtype = DType::i64});
}

void require_gradcheck(const Fn& f, const std::vector<Tensor>& inputs) {
  const auto r = autograd::gradcheck(f, inputs);
  INFO(r.worst);
  REQUIRE(r.ok);
  REQUIRE(r.checked > 0);
}

}  // namespace

TEST_CASE("index grad: cat and stack", "[autograd][index]") {
  require_gradcheck([](const std::vector<Tensor>& in) { return cat(in, 0); },
                    {leaf({2, 3}, 1), leaf({1, 3}, 2), leaf({4, 3}, 3)});
  require_gradcheck([](const std::vector<Tensor>& in) { return cat(in, -1); },
                    {leaf({2, 3, 2}, 4), leaf({2, 3, 1}, 5)});
  // Non-contiguous inputs and one input that needs no grad.
  const Tensor fixed = leaf({2, 2}, 6).detach();
  require_gradcheck(
      [&](const std::vector<Tensor>& in) {
        return cat({in[0].t(), fixed, in[1]}, 1);
      },
      {leaf({3, 2}, 7), leaf({2, 4}, 8)});
  require_gradcheck([](const std::vector<Tensor>& in) { return stack(in, 1); },
                    {leaf({2, 3}, 9), leaf({2, 3}, 10)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return stack({in[0], in[0].t()}, -1);
      },
      {leaf({3, 3}, 11)});
}

TEST_CASE("index grad: index_select, embedding and gather with repeated indices",
          "[autograd][index]") {
  const Tensor idx = i64({2, 0, 2, 2, 1}, {5});
  for (int64_t dim : {0, 1, -1}) {
    INFO("dim " << dim);
    require_gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0], dim, idx); },
                      {leaf({3, 3, 3}, 20)});
  }
  require_gradcheck(
      [&](const std::vector<Tensor>& in) { return index_select(in[0].transpose(0, 1), 1, idx); },
      {leaf({4, 3}, 21)});
  const Tensor tokens = i64({4, 1, 4, 0, 4, 2}, {2, 3});
  require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], tokens); },
                    {leaf({5, 3}, 22)});
  require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0].t(), tokens); },
                    {leaf({3, 5}, 23)});
  const Tensor gidx = i64({0, 0, 1, 2, 2, 2, 1, 0}, {2, 4});
  require_gradcheck([&](const std::vector<Tensor>& in) { return gather(in[0], 1, gidx); },
                    {leaf({2, 3}, 24)});
  require_gradcheck([&](const std::vector<Tensor>& in) { return gather(in[0], 0, gidx.t()); },
                    {leaf({3, 2}, 25)});
  require_gradcheck([&](const std::vector<Tensor>& in) { return gather(in[0].t(), 1, gidx); },
                    {leaf({3, 2}, 26)});
  // one_hot is not differentiable and returns i64.
  CHECK(one_hot(idx, 3).dtype() == DType::i64);
}
