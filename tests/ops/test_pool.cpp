#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "ops/pool.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::max_abs_diff;

namespace {

std::array<int64_t, 2> pair(const testing::FixtureCase& c, const std::string& key) {
  const auto v = c.attr_ints(key);
  REQUIRE(v.size() == 2);
  return {v[0], v[1]};
}

// Naive reference max pool over a contiguous f64 copy, with PyTorch's rule: the first maximum in
// scan order wins, NaN propagates (the last NaN's index).
Tensor reference_max_pool(const Tensor& x, const ops::Pool2dOptions& o, Tensor* indices) {
  const auto v = x.to_vector<double>();
  const int64_t H = x.size(-2), W = x.size(-1), planes = x.numel() / (H * W);
  const int64_t sh = o.stride[0] ? o.stride[0] : o.kernel_size[0];
  const int64_t sw = o.stride[1] ? o.stride[1] : o.kernel_size[1];
  const int64_t OH = ops::pool_output_size(H, o.kernel_size[0], sh, o.padding[0], o.ceil_mode);
  const int64_t OW = ops::pool_output_size(W, o.kernel_size[1], sw, o.padding[1], o.ceil_mode);
  std::vector<double> out;
  std::vector<int64_t> ind;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double m = -std::numeric_limits<double>::infinity();
        int64_t best = -1;
        for (int64_t kh = 0; kh < o.kernel_size[0]; ++kh)
          for (int64_t kw = 0; kw < o.kernel_size[1]; ++kw) {
            const int64_t h = oh * sh - o.padding[0] + kh, w = ow * sw - o.padding[1] + kw;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double val = v[p * H * W + h * W + w];
            if (best < 0 || val > m || std::isnan(val)) {  // torch: a later NaN replaces
              m = val;
              best = h * W + w;
            }
          }
        out.push_back(m);
        ind.push_back(best);
      }
  Shape s = x.shape();
  s[s.size() - 2] = OH;
  s[s.size() - 1] = OW;
  if (indices) *indices = from_vector(ind, s, {.dtype = DType::i64});
  return from_vector(out, s, {.dtype = x.dtype()});
}

}  // namespace

TEST_CASE("pool: PyTorch fixtures, forward and backward", "[ops][pool]") {
  const auto cases = testing::load_fixture(testing::fixture_path("pool.txt"));
  REQUIRE(cases.size() == 14);
  for (const auto& c : cases) {
    INFO("case " << c.name);
    for (DType dtype : {DType::f32, DType::f64}) {
      const Tensor x = testing::to_tensor(c.tensor("input"), dtype);
      const Tensor go = testing::to_tensor(c.tensor("grad_out"), dtype);
      const std::string op = c.attr("op");
      Tensor y, gi;
      if (op == "adaptive_avg_pool2d") {
        y = ops::adaptive_avg_pool2d(x, pair(c, "output_size"));
        gi = ops::adaptive_avg_pool2d_backward(go, x.shape());
      } else {
        const ops::Pool2dOptions o{.kernel_size = pair(c, "kernel"),
                                   .stride = pair(c, "stride"),
                                   .padding = pair(c, "padding")};
        if (op == "max_pool2d") {
          auto r = ops::max_pool2d_with_indices(x, o);
          y = r.output;
          // Exact: max pooling selects input values, with or without indices.
          CHECK(max_abs_diff(ops::max_pool2d(x, o), y) == 0);
          gi = ops::max_pool2d_backward(go, r.indices, x.shape());
        } else {
          REQUIRE(op == "avg_pool2d");
          y = ops::avg_pool2d(x, o);
          gi = ops::avg_pool2d_backward(go, x.shape(), o);
        }
      }
      CHECK(y.dtype() == dtype);
      // Outputs are selections (exact) or means of n <= 64 values (adaptive 8 -> 1 the largest
      // bin), input gradients sums of <= 9 shares of grad_out: a mean errs by <= n u mean|x|
      // (Higham eq. 3.5), 64 * 6e-8 * 0.8 = 3e-6 for N(0, 1) draws (mean|x| ~0.8) in f32, 6e-15
      // in f64; plus the fixture's rounding to f32 (6e-8 >= 2^-24 relative). f32 within torch's
      // atol for f32 (1e-5, assert_close), f64 within 1e-13.
      const double atol = dtype == DType::f32 ? 1e-5 : 1e-13, rtol = 6e-8;
      testing::check_matches(y, c.tensor("output"), "output", atol, rtol);
      testing::check_matches(gi, c.tensor("grad_input"), "grad_input", atol, rtol);
    }
  }
}

TEST_CASE("pool: max_pool2d matches a naive reference, indices included", "[ops][pool]") {
  struct Case {
    Shape shape;
    ops::Pool2dOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 3, 28, 28}, {.kernel_size = {2, 2}}},
      {{2, 3, 10, 10}, {.kernel_size = {2, 2}}},  // 5-wide rows: shorter than a block
      {{2, 3, 6, 34}, {.kernel_size = {2, 2}}},   // 17-wide rows: two blocks and an overlap
      {{2, 3, 9, 7}, {.kernel_size = {2, 2}}},    // odd: clipped edge
      {{2, 3, 9, 7}, {.kernel_size = {2, 2}, .ceil_mode = true}},  // partial windows
      {{3, 11, 10}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},  // 3-D input
      {{1, 2, 8, 9}, {.kernel_size = {3, 2}, .stride = {1, 3}, .padding = {1, 0}}},
      {{1, 2, 8, 9},
       {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}},
  };
  for (const auto& c : cases) {
    INFO("shape " << c.shape << " kernel " << c.o.kernel_size[0] << "," << c.o.kernel_size[1]);
    const Tensor x = randn(c.shape);
    Tensor ref_ind;
    const Tensor ref = reference_max_pool(x, c.o, &ref_ind);
    auto [y, ind] = ops::max_pool2d_with_indices(x, c.o);
    // Exact: selections of input values against an independent selection loop.
    CHECK(max_abs_diff(y, ref) == 0);
    CHECK(ind.to_vector<int64_t>() == ref_ind.to_vector<int64_t>());
    CHECK(max_abs_diff(ops::max_pool2d(x, c.o), ref) == 0);
  }
}

TEST_CASE("pool: non-contiguous input and ceil_mode sizes", "[ops][pool]") {
  const Tensor base = randn({3, 2, 10, 12});
  const Tensor x = base.transpose(0, 1);  // (2, 3, 10, 12), not contiguous
  REQUIRE_FALSE(x.is_contiguous());
  const ops::Pool2dOptions o{.kernel_size = {2, 2}};
  // Exact: the pools make their input contiguous before the same kernels.
  CHECK(max_abs_diff(ops::max_pool2d(x, o), ops::max_pool2d(x.contiguous(), o)) == 0);
  CHECK(max_abs_diff(ops::avg_pool2d(x, o), ops::avg_pool2d(x.contiguous(), o)) == 0);
  CHECK(max_abs_diff(ops::adaptive_avg_pool2d(x, {3, 5}),
                     ops::adaptive_avg_pool2d(x.contiguous(), {3, 5})) == 0);
  // Output sizes as torch computes them: floor((5 + 2 - 3) / 2) + 1 = 3, and ceil_mode keeps 3
  // (a 4th window would start in the right padding); for 6, ceil_mode adds a 4th window.
  CHECK(ops::pool_output_size(5, 3, 2, 1, false) == 3);
  CHECK(ops::pool_output_size(5, 3, 2, 1, true) == 3);
  CHECK(ops::pool_output_size(6, 3, 2, 1, false) == 3);
  CHECK(ops::pool_output_size(6, 3, 2, 1, true) == 4);
  CHECK(ops::pool_output_size(7, 2, 2, 0, true) == 4);
  CHECK(ops::max_pool2d(randn({1, 1, 7, 7}), {.kernel_size = {2, 2}, .ceil_mode = true}).shape() ==
        Shape{1, 1, 4, 4});
}

TEST_CASE("pool: avg_pool2d count_include_pad and ceil_mode divisors", "[ops][pool]") {
  const Tensor x = ones({1, 1, 3, 3});
  // Corner window with padding 1 covers 4 real elements out of 9.
  const Tensor inc =
      ops::avg_pool2d(x, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  const Tensor exc = ops::avg_pool2d(
      x, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
  // Exact: sums of ones are small integers, and 4 / 9 is one rounding either way.
  CHECK(inc.to_vector<float>() == std::vector<float>{4.f / 9, 4.f / 9, 4.f / 9, 4.f / 9});
  CHECK(exc.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  // ceil_mode: the last window hangs over the input; torch divides by the part inside input+pad.
  const Tensor c = ops::avg_pool2d(ones({1, 1, 3, 3}), {.kernel_size = {2, 2}, .ceil_mode = true});
  CHECK(c.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("pool: max_pool2d propagates NaN and picks the first of equal maxima", "[ops][pool]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = from_vector(std::vector<float>{1, nan, 2, 2, 3, 3, 3, 3}, {1, 1, 2, 4});
  auto [y, ind] = ops::max_pool2d_with_indices(x, {.kernel_size = {2, 2}});
  const auto v = y.to_vector<float>();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 3);
  CHECK(ind.to_vector<int64_t>() == std::vector<int64_t>{1, 6});
  CHECK(std::isnan(ops::max_pool2d(x, {.kernel_size = {2, 2}}).to_vector<float>()[0]));
}

TEST_CASE("pool: NaN and infinity in every kernel path", "[ops][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto v = randn({2, 2, 12, 20}, {.dtype = DType::f64}).to_vector<double>();
  for (size_t i = 0; i < v.size(); i += 37) v[i] = nan;
  for (size_t i = 5; i < v.size(); i += 53) v[i] = (i % 2) ? inf : -inf;
  for (size_t i = 9; i < v.size(); i += 29) v[i] = v[i - 1];  // ties
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = from_vector(v, {2, 2, 12, 20}, {.dtype = dtype});
    for (const ops::Pool2dOptions& o :
         {ops::Pool2dOptions{.kernel_size = {2, 2}},
          ops::Pool2dOptions{.kernel_size = {3, 3}, .stride = {1, 1}, .padding = {1, 1}},
          ops::Pool2dOptions{.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 0}}}) {
      INFO("kernel " << o.kernel_size[0] << "x" << o.kernel_size[1] << " dtype " << dtype);
      Tensor ref_ind;
      const auto ref = reference_max_pool(x, o, &ref_ind).to_vector<double>();
      auto [y, ind] = ops::max_pool2d_with_indices(x, o);
      const auto got = y.to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i)
        REQUIRE((got[i] == ref[i] || (std::isnan(got[i]) && std::isnan(ref[i]))));
      CHECK(ind.to_vector<int64_t>() == ref_ind.to_vector<int64_t>());
      const auto plain = ops::max_pool2d(x, o).to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i)
        REQUIRE((plain[i] == ref[i] || (std::isnan(plain[i]) && std::isnan(ref[i]))));
    }
  }
}

TEST_CASE("pool: adaptive_avg_pool2d global pooling equals the plane mean", "[ops][pool]") {
  const Tensor x = randn({4, 8, 7, 7}, {.dtype = DType::f64});
  const Tensor y = ops::adaptive_avg_pool2d(x, {1, 1});
  CHECK(y.shape() == Shape{4, 8, 1, 1});
  const auto vx = x.to_vector<double>();
  const auto vy = y.to_vector<double>();
  for (int64_t p = 0; p < 32; ++p) {
    double s = 0;
    for (int64_t i = 0; i < 49; ++i) s += vx[p * 49 + i];
    // f64 sums of 49 values < 5 on both sides: 2 * 49 u * 5 * 49 / 49 = 5e-14.
    CHECK(vy[p] == Approx(s / 49).margin(1e-13));
  }
}

TEST_CASE("pool: thread count does not change results", "[ops][pool]") {
  const Tensor x = randn({4, 16, 28, 28});
  const ops::Pool2dOptions o{.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const int saved = num_threads();
  set_num_threads(1);
  const Tensor a = ops::max_pool2d(x, o), b = ops::avg_pool2d(x, o);
  set_num_threads(2);
  const Tensor a2 = ops::max_pool2d(x, o), b2 = ops::avg_pool2d(x, o);
  set_num_threads(saved);
  // Exact: each output is computed by one thread, its window in a fixed order.
  CHECK(max_abs_diff(a, a2) == 0);
  CHECK(max_abs_diff(b, b2) == 0);
}

TEST_CASE("pool: errors name the op and what was wrong", "[ops][pool]") {
  const Tensor x = randn({1, 1, 6, 6});
  CHECK_THROWS_WITH(ops::max_pool2d(x, {.kernel_size = {2, 2}, .padding = {2, 0}}),
                    Catch::Contains("max_pool2d") && Catch::Contains("half the kernel size"));
  CHECK_THROWS_WITH(ops::avg_pool2d(x, {.kernel_size = {0, 2}}),
                    Catch::Contains("avg_pool2d") && Catch::Contains("kernel_size > 0"));
  CHECK_THROWS_WITH(ops::max_pool2d(randn({6, 6}), {.kernel_size = {2, 2}}),
                    Catch::Contains("(N, C, H, W)") && Catch::Contains("[6, 6]"));
  CHECK_THROWS_WITH(ops::max_pool2d(x, {.kernel_size = {7, 7}}), Catch::Contains("too small"));
  CHECK_THROWS_WITH(ops::avg_pool2d(x.to(DType::i64), {.kernel_size = {2, 2}}),
                    Catch::Contains("f32 or f64") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(ops::adaptive_avg_pool2d(x, {0, 2}), Catch::Contains("output_size > 0"));
  const Tensor idx = zeros({1, 1, 3, 3}, {.dtype = DType::i32});
  CHECK_THROWS_WITH(ops::max_pool2d_backward(randn({1, 1, 3, 3}), idx, {1, 1, 6, 6}),
                    Catch::Contains("indices of dtype i64"));
  const Tensor bad = full({1, 1, 3, 3}, 36, {.dtype = DType::i64});
  CHECK_THROWS_WITH(ops::max_pool2d_backward(randn({1, 1, 3, 3}), bad, {1, 1, 6, 6}),
                    Catch::Contains("out of range"));
}
