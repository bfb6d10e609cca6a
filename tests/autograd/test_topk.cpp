// topk on the CPU against torch.topk's fixtures (tests/fixtures/topk.txt): -inf, +inf and NaN
// several times in a row, ties, -0 and 0, k = n, largest and smallest, along the last dim and
// along dim 0 of a 3-D tensor, in f32, f64 and (where the values are small integers, exact in
// every dtype) f16 and bf16; the result does not depend on the thread count; the values' gradient
// (a gather) passes gradcheck.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"
#include "support/topk_check.h"

using namespace stoke;

TEST_CASE("topk: torch's values and index sets on -inf, NaN, ties and k = n",
          "[autograd][reduce][topk][fixture]") {
  const auto cases = testing::load_fixture(testing::fixture_path("topk.txt"));
  REQUIRE(cases.size() == 22);
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const auto& c : cases) {
      // Random normal values would tie after rounding to f16 or bf16: those cases run in f32/f64.
      const bool integral = c.name.rfind("distinct", 0) != 0;
      for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
        if (!integral && (dt == DType::f16 || dt == DType::bf16)) continue;
        INFO("case " << c.name << " " << dt << " threads " << threads);
        const Tensor x = testing::to_tensor(c.tensor("input"), DType::f32).to(dt);
        const auto got = topk(x, c.attr_int("k"),
                              {.dim = c.attr_int("dim"), .largest = c.attr_int("largest") != 0});
        testing::check_topk_matches_torch(x, got, c);
      }
    }
  }
  set_num_threads(saved);
}

TEST_CASE("topk: a row of several -inf and NaN gives each index once, and gradients follow",
          "[autograd][reduce][topk]") {
  // The case of issue 38: masking a taken -inf with -inf picked it again.
  const Tensor x = from_vector<double>({-INFINITY, 2, -INFINITY, NAN, -INFINITY, NAN}, {1, 6},
                                       {.dtype = DType::f64})
                       .set_requires_grad(true);
  const auto top = topk(x, 6);
  CHECK(top.indices.to_vector<int64_t>() == std::vector<int64_t>{3, 5, 1, 0, 2, 4});
  const auto low = topk(x, 6, {.largest = false});
  CHECK(low.indices.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4, 1, 3, 5});
  // The values are a gather: each picked position gets its weight's gradient, once.
  sum(top.values.narrow(1, 1, 3) * from_vector<double>({1, 2, 3}, {1, 3}, {.dtype = DType::f64}))
      .backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 2, 0, 0, 0, 1});
}

TEST_CASE("topk: the values' gradient passes gradcheck", "[autograd][reduce][topk]") {
  // Distinct values (gradcheck's steps of 1e-6 never reorder them): a gather of the picked
  // positions, largest and smallest, along either dim.
  Generator g(3);
  for (const TopkOptions& o :
       {TopkOptions{}, TopkOptions{.dim = 0, .largest = false}, TopkOptions{.largest = false}}) {
    const Tensor x = randn({4, 6}, {.dtype = DType::f64}, &g).set_requires_grad(true);
    const auto r = autograd::gradcheck(
        [&](const std::vector<Tensor>& in) { return topk(in[0], 3, o).values; }, {x});
    INFO(r.worst);
    CHECK(r.ok);
  }
}
