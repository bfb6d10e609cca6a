// topk on "cuda" tensors (emulated): stoke-train takes top-5 accuracy on the device. Against
// torch.topk's fixtures (tests/fixtures/topk.txt: -inf, +inf and NaN several times in a row, ties,
// -0 and 0, k = n, largest and smallest, along the last dim and along dim 0), in f32 and, where
// the values are small integers (exact in f16), f16; and the same indices as on the CPU: topk's
// passes are selections (comparisons, where, max/min, argmax), so both devices take the same
// positions by construction.
#include <catch2/catch.hpp>

#include "ops_cuda_util.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"
#include "support/topk_check.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("cuda ops: topk matches torch on -inf, NaN, ties and k = n, and the CPU's indices",
          "[ops_cuda_topk]") {
  const auto cases = testing::load_fixture(testing::fixture_path("topk.txt"));
  REQUIRE(cases.size() == 22);
  for (const auto& c : cases) {
    const bool integral = c.name.rfind("distinct", 0) != 0;
    for (DType dt : {DType::f32, DType::f16}) {
      if (!integral && dt == DType::f16) continue;
      INFO("case " << c.name << " " << dt);
      const Tensor x = testing::to_tensor(c.tensor("input"), DType::f32).to(dt);
      const TopkOptions o{.dim = c.attr_int("dim"), .largest = c.attr_int("largest") != 0};
      const auto got = topk(x.to(kCuda), c.attr_int("k"), o);
      testing::check_topk_matches_torch(x.to(kCuda), got, c);
      const auto cpu = topk(x, c.attr_int("k"), o);
      CHECK(got.indices.to(Device::cpu()).to_vector<int64_t>() == cpu.indices.to_vector<int64_t>());
    }
  }
}

TEST_CASE("cuda ops: top-5 of logits as stoke-train evaluates them", "[ops_cuda_topk]") {
  // A batch of 10-class logits with some rows of equal logits (an untrained model's): the indices
  // read back equal the CPU's, distinct in every row.
  Tensor logits = rand_cpu({64, 10}, 3);
  logits.narrow(0, 0, 8).copy_(zeros({8, 10}));
  const auto dev = topk(logits.to(kCuda), 5, {.dim = 1});
  const auto cpu = topk(logits, 5, {.dim = 1});
  const auto idx = dev.indices.to(Device::cpu()).to_vector<int64_t>();
  CHECK(idx == cpu.indices.to_vector<int64_t>());
  for (size_t r = 0; r < 8; ++r)  // all ties: the lowest indices, in order
    CHECK(std::vector<int64_t>(idx.begin() + r * 5, idx.begin() + r * 5 + 5) ==
          std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(max_diff(dev.values, cpu.values) == 0);
}
