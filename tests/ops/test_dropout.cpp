#include <catch2/catch.hpp>

#include "ops/dropout.h"
#include "stoke/stoke.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::max_abs_diff;

TEST_CASE("dropout: keeps about 1 - p, scales by 1 / (1 - p)", "[ops][dropout]") {
  Generator gen(123);
  const Tensor x = ones({200, 500});
  for (double p : {0.1, 0.5, 0.8}) {
    INFO("p " << p);
    auto [y, mask] = ops::dropout_with_mask(x, p, &gen);
    const auto v = y.to_vector<float>();
    const auto m = mask.to_vector<uint8_t>();
    int64_t kept = 0;
    // A kept 1 is 1 * float(1 / (1 - p)): one rounding of the scale, u relative.
    for (size_t i = 0; i < v.size(); ++i) {
      REQUIRE((v[i] == 0 || v[i] == Approx(1 / (1 - p)).epsilon(0x1p-24)));
      REQUIRE((v[i] != 0) == (m[i] == 1));
      kept += m[i];
    }
    const double frac = double(kept) / double(v.size());
    // 100k Bernoulli draws: standard deviation of the fraction is at most 0.0016; 0.01 is 6 of
    // them (a false failure once in 5e8 runs).
    CHECK(frac == Approx(1 - p).margin(0.01));
  }
}

TEST_CASE("dropout: identity, zeros and errors", "[ops][dropout]") {
  const Tensor x = randn({3, 4});
  CHECK(ops::dropout(x, 0.5, false).is_same(x));
  CHECK(ops::dropout(x, 0.0, true).is_same(x));
  CHECK(ops::dropout(x, 1.0, true).to_vector<float>() == std::vector<float>(12, 0.f));  // exact
  CHECK_THROWS_WITH(ops::dropout(x, 1.5, true), Catch::Contains("dropout") &&
                                                    Catch::Contains("[0, 1]") &&
                                                    Catch::Contains("1.5"));
  CHECK_THROWS_WITH(ops::dropout(x, -0.1, false), Catch::Contains("[0, 1]"));
  CHECK_THROWS_WITH(ops::dropout(x.to(DType::i32), 0.5, true), Catch::Contains("f32 or f64"));
  CHECK_THROWS_WITH(ops::dropout_backward(x, zeros({3, 4}, {.dtype = DType::u8}).view({4, 3}), 0.5),
                    Catch::Contains("mask of shape [3, 4]"));
}

TEST_CASE("dropout: mask is Philox element i -> block offset + i / 4, output i % 4",
          "[ops][dropout]") {
  Generator gen(77);
  gen.reserve(5);  // start from a non-zero offset
  const GeneratorState st = gen.state();
  const int64_t n = 1001;  // not a multiple of 4 or of the kernel's block group
  auto [y, mask] = ops::dropout_with_mask(ones({n}, {.dtype = DType::f64}), 0.3, &gen);
  CHECK(gen.state().offset == st.offset + (n + 3) / 4);
  const auto m = mask.to_vector<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const auto r = philox4x32(st.offset + static_cast<uint64_t>(i / 4), 0, st.seed);
    const bool keep = uint32_to_unit_float(r[i % 4]) < 0.7;
    REQUIRE(m[i] == (keep ? 1 : 0));
  }
}

TEST_CASE("dropout: same mask for every thread count and for f32 and f64", "[ops][dropout]") {
  const Tensor x = randn({64, 1000});
  const int saved = num_threads();
  Generator gen(5);
  set_num_threads(1);
  const auto a = ops::dropout_with_mask(x, 0.4, &gen);
  gen.manual_seed(5);
  set_num_threads(2);
  const auto b = ops::dropout_with_mask(x, 0.4, &gen);
  gen.manual_seed(5);
  const auto c = ops::dropout_with_mask(x.to(DType::f64), 0.4, &gen);
  set_num_threads(saved);
  // Exact: element i's draw is Philox's counter i / 4 whatever the thread or dtype (the mask is a
  // selection), and each output element is the same one multiply.
  CHECK(a.mask.to_vector<uint8_t>() == b.mask.to_vector<uint8_t>());
  CHECK(a.mask.to_vector<uint8_t>() == c.mask.to_vector<uint8_t>());
  CHECK(max_abs_diff(a.output, b.output) == 0);
  // The default generator is used when none is given, and advances.
  manual_seed(9);
  const auto d1 = ops::dropout(x, 0.4, true);
  manual_seed(9);
  const auto d2 = ops::dropout(x, 0.4, true);
  CHECK(max_abs_diff(d1, d2) == 0);  // exact: a rerun from the same seed
  CHECK(max_abs_diff(d1, ops::dropout(x, 0.4, true)) > 0);
}

TEST_CASE("dropout: backward multiplies by the saved mask", "[ops][dropout]") {
  Generator gen(1);
  const Tensor x = randn({5, 7}).transpose(0, 1);  // non-contiguous input
  auto [y, mask] = ops::dropout_with_mask(x, 0.25, &gen);
  const Tensor g = randn({7, 5});
  const auto gi = ops::dropout_backward(g, mask, 0.25).to_vector<float>();
  const auto gv = g.to_vector<float>();
  const auto m = mask.to_vector<uint8_t>();
  // g * float(1 / 0.75) (two roundings: the scale's and the product's) against g / 0.75f (one):
  // 3 u relative, 4 u to cover the second-order terms.
  for (size_t i = 0; i < gi.size(); ++i)
    CHECK(gi[i] == Approx(m[i] ? gv[i] / 0.75f : 0.f).epsilon(4 * 0x1p-24));
}
