#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "ops/reduce.h"
#include "stoke/stoke.h"
#include "support/fixture_tensor.h"

using namespace stoke;

namespace {

// Reference reduction in f64 by brute force: every input element is mapped to its output slot.
struct Naive {
  std::vector<double> sum, var, sumsq;  // sumsq: the sum of x^2 over each output's elements
  std::vector<int64_t> count;
  Shape shape;
};

Naive naive_reduce(const Tensor& x, std::vector<int64_t> dims, bool keepdim, int64_t correction) {
  const int64_t nd = x.dim();
  std::vector<bool> mask(nd, dims.empty());
  for (int64_t d : dims) mask[d < 0 ? d + nd : d] = true;
  Naive r;
  Shape keep;
  for (int64_t d = 0; d < nd; ++d) {
    keep.push_back(mask[d] ? 1 : x.size(d));
    if (!mask[d] || keepdim) r.shape.push_back(mask[d] ? 1 : x.size(d));
  }
  const int64_t nout = keep.numel();
  r.sum.assign(nout, 0);
  r.sumsq.assign(nout, 0);
  r.var.assign(nout, 0);
  r.count.assign(nout, 0);
  const std::vector<double> v = x.to_vector<double>();
  auto slot = [&](int64_t i) {
    int64_t o = 0, mul = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t idx = i % x.size(d);
      i /= x.size(d);
      if (!mask[d]) o += idx * mul;
      mul *= keep[d];
    }
    return o;
  };
  for (int64_t i = 0; i < x.numel(); ++i) {
    r.sum[slot(i)] += v[i];
    r.sumsq[slot(i)] += v[i] * v[i];
    r.count[slot(i)] += 1;
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t o = slot(i);
    const double d = v[i] - r.sum[o] / r.count[o];
    r.var[o] += d * d;
  }
  for (int64_t o = 0; o < nout; ++o) r.var[o] /= static_cast<double>(r.count[o] - correction);
  return r;
}

// One CHECK per tensor (not per element) keeps the large cases fast: |got - want| <= bound[i].
void check_within(const Tensor& got, const std::vector<double>& want,
                  const std::vector<double>& bound) {
  const std::vector<double> g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - want[i]) <= bound[i]) && bad++ == 0) first = i;
  INFO(bad << " mismatches; first at " << first << ": got " << (bad ? g[first] : 0.0) << ", want "
           << (bad ? want[first] : 0.0) << " +- " << (bad ? bound[first] : 0.0));
  CHECK(bad == 0);
}

// The bounds. A sum runs in 32 lanes of the input's type per block of 1,024 elements (chains of
// 32 additions, then a 5-level tree of the lanes), the blocks' totals in f64 (ops/cpu/reduce.cpp;
// columns accumulate in f64 throughout, which only lowers the error). An addition with result
// s_k errs by delta_k s_k, |delta_k| <= u; with the delta_k independent and of mean zero,
// |sum delta_k s_k| <= 8 u sqrt(sum s_k^2) with probability >= 1 - 2 exp(-32) (Hoeffding). For
// values of mean ~0 a chain's partial sums have E s_k^2 = k sigma^2, so the chains give 16 sum x^2
// and each tree level sum x^2 (per block): sum s_k^2 ~ 21 sum x^2; 32 sum x^2 with margin. The
// result's rounding to the dtype adds u |sum|, and the naive f64 reference's own recursive sum
// (sum s_k^2 ~ n sum x^2 / 2) 8 u64 sqrt(n sum x^2 / 2). The mean divides all of it by n. The
// variance sums (x - mean)^2 >= 0 in f64 lanes on both sides: relative (n + 2) u64 each (Higham
// eq. 3.5 for positive terms), and the result's rounding u.
void check_all_reductions(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  INFO("shape " << x.shape() << " dims " << Shape(dims) << " keepdim " << keepdim);
  const double u = testing::unit_roundoff(x.dtype()), u64 = 0x1p-53;
  const Naive r = naive_reduce(x, dims, keepdim, 1);
  const size_t nout = r.sum.size();
  std::vector<double> sum_bound(nout), mean(nout), mean_bound(nout), var_bound(nout);
  std::vector<double> biased(nout), biased_bound(nout);
  for (size_t i = 0; i < nout; ++i) {
    const double n = static_cast<double>(r.count[i]);
    sum_bound[i] = 8 * u * std::sqrt(32 * r.sumsq[i]) + u * std::abs(r.sum[i]) +
                   8 * u64 * std::sqrt(n * r.sumsq[i] / 2);
    mean[i] = r.sum[i] / n;
    mean_bound[i] = sum_bound[i] / n + u * std::abs(mean[i]);
    var_bound[i] = (2 * (n + 2) * u64 + u) * r.var[i];
    biased[i] = r.var[i] * (n - 1) / n;
    biased_bound[i] = (2 * (n + 2) * u64 + u) * biased[i];
  }
  const Tensor s = ops::sum(x, dims, keepdim);
  CHECK(s.shape() == r.shape);
  CHECK(s.dtype() == x.dtype());
  check_within(s, r.sum, sum_bound);
  const Tensor m = ops::mean(x, dims, keepdim);
  CHECK(m.shape() == r.shape);
  check_within(m, mean, mean_bound);
  const Tensor v = ops::var(x, dims, 1, keepdim);
  CHECK(v.shape() == r.shape);
  check_within(v, r.var, var_bound);
  check_within(ops::var(x, dims, 0, keepdim), biased, biased_bound);
}

}  // namespace

TEST_CASE("reduce: sum/mean/var match naive loops over dim sets", "[ops][reduce]") {
  const Tensor x = randn({2, 3, 4, 5});
  const std::vector<std::vector<int64_t>> dim_sets = {
      {}, {0}, {1}, {3}, {-1}, {0, 2}, {1, 3}, {2, 0}, {1, 2}, {0, 1, 2, 3}, {-3, -1}};
  for (const auto& dims : dim_sets)
    for (bool keepdim : {false, true}) check_all_reductions(x, dims, keepdim);
  check_all_reductions(x.to(DType::f64), {1, 3}, false);
  // Size-1 dims mixed in, and a 1-D tensor.
  check_all_reductions(randn({1, 7, 1, 3}), {1}, true);
  check_all_reductions(randn({1, 7, 1, 3}), {0, 3}, false);
  check_all_reductions(randn({9}), {0}, false);
}

TEST_CASE("reduce: large shapes take the parallel paths and stay exact", "[ops][reduce]") {
  const int saved = num_threads();
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    // Few long rows (split over the reduced range), many short rows, column sums with a small and
    // a large output, and a middle-dim reduction.
    check_all_reductions(randn({3, 70000}), {1}, false);
    check_all_reductions(randn({300, 200}), {1}, true);
    check_all_reductions(randn({50000, 3}), {0}, false);
    check_all_reductions(randn({200, 300}), {0}, false);
    // Outer and innermost dims reduced (NCHW over (0, 2, 3)), and [R, K, R, K].
    check_all_reductions(randn({8, 6, 40, 50}), {0, 2, 3}, false);
    check_all_reductions(randn({3, 4, 5, 6}), {0, 2}, true);
    check_all_reductions(randn({4, 9000, 5}), {1}, false);
    check_all_reductions(randn({40, 30, 50}), {0, 2}, false);
  }
  set_num_threads(saved);
}

TEST_CASE("reduce: results are deterministic for a thread count", "[ops][reduce]") {
  // Exact: a rerun, with the partial sums combined in chunk order.
  const Tensor x = randn({5, 200000});
  const auto a = ops::sum(x, {1}).to_vector<float>();
  const auto b = ops::sum(x, {1}).to_vector<float>();
  CHECK(a == b);
  const Tensor y = randn({100000, 4});
  CHECK(ops::sum(y, {0}).to_vector<float>() == ops::sum(y, {0}).to_vector<float>());
}

TEST_CASE("reduce: non-contiguous inputs", "[ops][reduce]") {
  const Tensor base = randn({4, 5, 6});
  check_all_reductions(base.transpose(0, 2), {1}, false);
  check_all_reductions(base.permute({1, 2, 0}), {0, 2}, true);
  check_all_reductions(base.slice(2, 0, 6, 2), {}, false);
  check_all_reductions(base.select(1, 3), {-1}, false);
}

TEST_CASE("reduce: sum of 1e6 f32 values is accurate", "[ops][reduce]") {
  const Tensor x = uniform({1000000}, 0.0, 1.0);
  const std::vector<float> v = x.to_vector<float>();
  double ref = 0;
  for (float f : v) ref += f;
  // Positive terms: each block's f32 lanes (chains of 32, a 5-level tree) err by <= 37 u of the
  // block's sum at worst, independently per block; the 977 blocks' totals add in f64, so with
  // Hoeffding's 8 sigma the total's relative error is <= 8 * 37 u / sqrt(977) = 5.7e-7, and the
  // f64 reference's 1e6 u64 = 1.1e-10: 1e-6.
  const double got = ops::sum(x).item();
  CHECK(std::abs(got - ref) / ref < 1e-6);
  const double got_mean = ops::mean(x.view({1000, 1000}), {0, 1}).item();
  CHECK(std::abs(got_mean - ref / 1e6) / (ref / 1e6) < 1e-6);
  // Column sums over 1e6 rows as well: accumulated in f64, so only the result's rounding (u).
  const Tensor c = x.view({500000, 2});
  const auto cs = ops::sum(c, {0}).to_vector<double>();
  double r0 = 0, r1 = 0;
  for (size_t i = 0; i < v.size(); i += 2) {
    r0 += v[i];
    r1 += v[i + 1];
  }
  CHECK(std::abs(cs[0] - r0) / r0 < 1e-6);
  CHECK(std::abs(cs[1] - r1) / r1 < 1e-6);
}

TEST_CASE("reduce: var is numerically stable with a large mean", "[ops][reduce]") {
  // Values 1e4 + N(0, 0.1^2): a one-pass sum-of-squares formula in f32 would lose everything, and
  // a mean rounded to f32 (off by up to half an ulp of 1e4, 4.9e-4) adds its square to each
  // row's variance of 0.01: up to 2.4e-5 relative.
  const Tensor x = randn({100000});
  const std::vector<float> n = x.to_vector<float>();
  std::vector<float> shifted(n.size());
  for (size_t i = 0; i < n.size(); ++i) shifted[i] = 1e4f + 0.1f * n[i];
  const Tensor y = from_vector(shifted, {100000});
  const Naive r = naive_reduce(y, {}, false, 1);
  // torch's f32 var is 1.3e-8 off here; a mean rounded to f32 made ours 2e-6. Both passes sum in
  // f64 (100,000 positive squares: (n + 2) u64 = 1.1e-11 relative) and the result rounds to f32
  // once (u = 6e-8): 1e-7.
  CHECK(std::abs(ops::var(y).item() - r.var[0]) / r.var[0] < 1e-7);
  const Tensor rows = y.view({100, 1000});
  const Naive rr = naive_reduce(rows, {1}, false, 0);
  const auto got = ops::var(rows, {1}, 0).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("row " << i);
    REQUIRE(std::abs(got[i] - rr.var[i]) / rr.var[i] < 1e-7);
  }
}

TEST_CASE("reduce: integer sums accumulate in i64", "[ops][reduce]") {
  const Tensor a = arange(0, 24, 1, {.dtype = DType::i32}).view({2, 3, 4});
  const Tensor s = ops::sum(a, {1});
  CHECK(s.dtype() == DType::i64);
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{12, 15, 18, 21, 48, 51, 54, 57});
  CHECK(ops::sum(a).item<int64_t>() == 276);
  CHECK(ops::sum(a, {0, 2}).to_vector<int64_t>() == std::vector<int64_t>{60, 92, 124});
  // u8 values whose sum overflows u8 and i32 inputs whose sum overflows i32.
  const Tensor u = full({1000}, 200, {.dtype = DType::u8});
  CHECK(ops::sum(u).item<int64_t>() == 200000);
  const Tensor big = full({4}, 2000000000, {.dtype = DType::i32});
  CHECK(ops::sum(big).to_vector<int64_t>()[0] == 8000000000LL);
  const Tensor b = from_vector<float>({1, 0, 1, 1}, {4}, {.dtype = DType::boolean});
  CHECK(ops::sum(b).item<int64_t>() == 3);
  CHECK(ops::sum(a.to(DType::i64), {0, 2}, true).shape() == Shape{1, 3, 1});
}

TEST_CASE("reduce: max/min/argmax/argmin along a dim", "[ops][reduce]") {
  const Tensor x = randn({3, 4, 5});
  const std::vector<float> v = x.to_vector<float>();
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    const auto mx = ops::max_with_indices(x, dim);
    const auto mn = ops::min_with_indices(x, dim, true);
    const std::vector<float> mxv = mx.values.to_vector<float>(), mnv = mn.values.to_vector<float>();
    const std::vector<int64_t> mxi = mx.indices.to_vector<int64_t>();
    const std::vector<int64_t> mni = ops::argmin(x, dim).to_vector<int64_t>();
    CHECK(mn.values.dim() == 3);
    CHECK(mn.values.size(d) == 1);
    CHECK(mx.values.dim() == 2);
    CHECK(ops::argmax(x, dim).to_vector<int64_t>() == mxi);
    CHECK(ops::max(x, dim).to_vector<float>() == mxv);
    const Shape s = x.shape();
    int64_t o = 0;
    for (int64_t i = 0; i < s.numel(); ++i) {
      // Enumerate output positions: the element with index 0 along d.
      int64_t rem = i, stride = 1;
      for (int64_t k = 2; k > d; --k) stride *= s[k];
      if ((rem / stride) % s[d] != 0) continue;
      float best = v[i], worst = v[i];
      int64_t bi = 0, wi = 0;
      for (int64_t j = 1; j < s[d]; ++j) {
        const float e = v[i + j * stride];
        if (e > best) best = e, bi = j;
        if (e < worst) worst = e, wi = j;
      }
      CHECK(mxv[o] == best);
      CHECK(mxi[o] == bi);
      CHECK(mnv[o] == worst);
      CHECK(mni[o] == wi);
      ++o;
    }
    CHECK(o == mx.values.numel());
  }
}

TEST_CASE("reduce: max/min ties, NaN, all elements, integers", "[ops][reduce]") {
  const Tensor t = from_vector<float>({1, 3, 3, 0, 2, 2, 5, 5}, {2, 4});
  CHECK(ops::argmax(t, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(ops::argmin(t, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 0});
  CHECK(ops::max(t).item() == 5);
  CHECK(ops::argmax(t).item<int64_t>() == 6);
  CHECK(ops::min(t).item() == 0);
  CHECK(ops::argmin(t).item<int64_t>() == 3);
  CHECK(ops::max(t).dim() == 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor n = from_vector<float>({1, nan, 7, 2}, {4});
  CHECK(std::isnan(ops::max(n).item()));
  CHECK(ops::argmax(n).item<int64_t>() == 1);
  CHECK(std::isnan(ops::min(n, 0).item()));
  const Tensor i = from_vector<int64_t>({4, -2, 9, 9}, {2, 2}, {.dtype = DType::i64});
  CHECK(ops::max(i, 1).to_vector<int64_t>() == std::vector<int64_t>{4, 9});
  CHECK(ops::min(i).item<int64_t>() == -2);
  // Long rows split over threads keep the first maximum.
  Tensor big = zeros({300000});
  big.narrow(0, 123456, 1).copy_(full({1}, 3));
  big.narrow(0, 234567, 1).copy_(full({1}, 3));
  CHECK(ops::argmax(big).item<int64_t>() == 123456);
  Tensor neg = zeros({300000});
  neg.narrow(0, 123456, 1).copy_(full({1}, -3));
  neg.narrow(0, 234567, 1).copy_(full({1}, -3));
  CHECK(ops::argmin(neg).item<int64_t>() == 123456);
}

TEST_CASE("reduce: argmax/argmin of long rows pick the first extremum", "[ops][reduce]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dt);
    for (const std::vector<int64_t>& at : std::vector<std::vector<int64_t>>{
             {20, 40}, {19, 33}, {33, 19}, {0, 63}, {70, 99}, {5, 101}, {100, 101}}) {
      INFO("peaks at " << at[0] << ", " << at[1]);
      std::vector<double> v(102);
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i));
      for (int64_t i : at) v[i] = 5;
      const Tensor x = from_vector(v, {2, 51}, {.dtype = dt}).view({102});
      CHECK(ops::argmax(x).item<int64_t>() == std::min(at[0], at[1]));
      for (double& e : v) e = -e;
      const Tensor y = from_vector(v, {102}, {.dtype = dt});
      CHECK(ops::argmin(y, 0).item<int64_t>() == std::min(at[0], at[1]));
      CHECK(ops::min(y).item() == -5);
    }
    // Infinities are values, not NaNs.
    std::vector<double> w(80, 1.0);
    w[50] = INFINITY;
    w[70] = INFINITY;
    w[3] = -INFINITY;
    const Tensor z = from_vector(w, {80}, {.dtype = dt});
    CHECK(ops::argmax(z).item<int64_t>() == 50);
    CHECK(ops::argmin(z).item<int64_t>() == 3);
    w[60] = NAN;
    w[75] = NAN;
    CHECK(ops::argmax(from_vector(w, {80}, {.dtype = dt})).item<int64_t>() == 60);
  }
}

TEST_CASE("reduce: backward kernels", "[ops][reduce]") {
  const Tensor g = from_vector<float>({1, 2, 3}, {3});
  CHECK(ops::sum_backward(g, {3, 2}, {1}).to_vector<float>() ==
        std::vector<float>{1, 1, 2, 2, 3, 3});
  CHECK(ops::mean_backward(g.view({1, 3}), {2, 3}, {0}, true).to_vector<float>() ==
        std::vector<float>{0.5f, 1, 1.5f, 0.5f, 1, 1.5f});
  const Tensor idx = from_vector<int64_t>({1, 0, 1}, {3}, {.dtype = DType::i64});
  CHECK(ops::index_reduce_backward(g, idx, {2, 3}, 0).to_vector<float>() ==
        std::vector<float>{0, 2, 0, 1, 0, 3});
  CHECK_THROWS_WITH(ops::sum_backward(g, {3, 2}, {0}),
                    Catch::Contains("expected grad of shape [2]"));
}

TEST_CASE("reduce: errors name the op and the problem", "[ops][reduce]") {
  const Tensor x = randn({2, 3});
  CHECK_THROWS_WITH(ops::sum(x, {2}),
                    Catch::Contains("sum") && Catch::Contains("dim 2 out of range"));
  CHECK_THROWS_WITH(ops::mean(x, {1, -1}), Catch::Contains("appears more than once"));
  CHECK_THROWS_WITH(ops::max(x, -3), Catch::Contains("max") && Catch::Contains("out of range"));
  CHECK_THROWS_WITH(ops::mean(arange(0, 4, 1, {.dtype = DType::i64})),
                    Catch::Contains("mean") && Catch::Contains("f32 or f64"));
  CHECK_THROWS_WITH(ops::max(zeros({0, 3})), Catch::Contains("non-empty"));
  CHECK_THROWS_WITH(ops::argmax(zeros({2, 0}), 1), Catch::Contains("size 0"));
  // f16 on the CPU: summed in f32, the result rounded to f16 (ops/cpu/backend.cpp); exact, as the
  // same f32 sum of the same values rounded once.
  CHECK(ops::sum(x.to(DType::f16)).to_vector<float>() ==
        ops::sum(x.to(DType::f16).to(DType::f32)).to(DType::f16).to_vector<float>());
  // 0-dim inputs reduce to themselves.
  const Tensor s = scalar_tensor(2.5);
  CHECK(ops::sum(s).item() == 2.5);
  CHECK(ops::mean(s, {0}).item() == 2.5);
  CHECK(ops::max(s, 0).item() == 2.5);
  CHECK(ops::argmax(s).item<int64_t>() == 0);
  CHECK(ops::max(s).item() == 2.5);
  // Empty reductions follow PyTorch: sum 0, mean NaN.
  CHECK(ops::sum(zeros({0, 3}), {0}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(std::isnan(ops::mean(zeros({0})).item()));
}
