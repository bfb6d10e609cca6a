// group_norm and layer_norm (ops/group_norm.h) on the CPU: PyTorch's fixtures forward and backward
// in f32 and f64, a double reference on odd shapes, statistics of data with a large offset,
// strided inputs, and the argument errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "ops/group_norm.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::max_abs_diff;

namespace {

// Naive group norm in double on the (N, G, K, S) view: output, per-row mean and rstd.
struct RefNorm {
  std::vector<double> out, mean, rstd;
};
RefNorm reference(const Tensor& x, int64_t G, int64_t K, const std::vector<double>& w,
                  const std::vector<double>& b, double eps) {
  const auto v = x.to_vector<double>();
  const int64_t M = int64_t(v.size()) / (x.size(0) * G);
  const int64_t S = M / K, R = x.size(0) * G;
  RefNorm r{std::vector<double>(v.size()), std::vector<double>(R), std::vector<double>(R)};
  for (int64_t row = 0; row < R; ++row) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < M; ++i) s += v[row * M + i];
    const double mean = s / double(M);
    for (int64_t i = 0; i < M; ++i) q += (v[row * M + i] - mean) * (v[row * M + i] - mean);
    const double rstd = 1 / std::sqrt(q / double(M) + eps);
    r.mean[row] = mean;
    r.rstd[row] = rstd;
    for (int64_t i = 0; i < M; ++i) {
      const int64_t c = (row % G) * K + i / S;
      r.out[row * M + i] =
          (v[row * M + i] - mean) * rstd * (w.empty() ? 1.0 : w[c]) + (b.empty() ? 0.0 : b[c]);
    }
  }
  return r;
}

double max_diff(const Tensor& t, const std::vector<double>& ref) {
  const auto v = t.to_vector<double>();
  REQUIRE(v.size() == ref.size());
  double m = 0;
  for (size_t i = 0; i < v.size(); ++i) m = std::max(m, std::abs(v[i] - ref[i]));
  return m;
}

}  // namespace

TEST_CASE("group_norm / layer_norm: PyTorch fixtures (output and gradients)", "[ops][group_norm]") {
  const auto cases = testing::load_fixture(testing::fixture_path("group_norm.txt"));
  REQUIRE(cases.size() == 10);
  for (const auto& c : cases) {
    INFO("case " << c.name);
    const bool layer = c.attr("op") == "layer_norm";
    const bool affine = c.attr_int("affine") != 0;
    const NormOptions o{.eps = c.attr_double("eps")};
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(dtype_name(dtype));
      const Tensor x = testing::to_tensor(c.tensor("input"), dtype);
      const Tensor w = affine ? testing::to_tensor(c.tensor("weight"), dtype) : Tensor();
      const Tensor b = affine ? testing::to_tensor(c.tensor("bias"), dtype) : Tensor();
      const Tensor gy = testing::to_tensor(c.tensor("grad_out"), dtype);
      ops::GroupNormForward f;
      ops::GroupNormGrads g;
      if (layer) {
        const Shape ns(c.attr_ints("normalized_shape"));
        f = ops::layer_norm_forward(x, ns, w, b, o);
        g = ops::layer_norm_backward(gy, x, ns, w, f.save_mean, f.save_rstd);
      } else {
        const int64_t groups = c.attr_int("groups");
        f = ops::group_norm_forward(x, groups, w, b, o);
        g = ops::group_norm_backward(gy, x, groups, w, f.save_mean, f.save_rstd);
      }
      // The references are f64 results rounded to f32 (6e-8 >= 2^-24 relative). f64: that
      // rounding alone, and f64 sums (atol 1e-9 > 1024 * 2^-53 * 1e4 * rstd ~1 for the offset
      // cases' inputs ~1e3-1e4; 1e-12 covers the others' |x| < 5 the same way). f32: torch's f32
      // tolerance (assert_close: atol 1e-5, rtol 1.3e-6), except for the offset cases, where the
      // mean is rounded to f32 (half an ulp of 1e3-1e4: 3e-5 .. 5e-4, times rstd ~1, into every
      // normalized value and, summed over a row's dy, into the weight gradient): 2e-3.
      const bool offset = c.name.find("offset") != std::string::npos;
      const double atol = dtype == DType::f64 ? (offset ? 1e-9 : 1e-12) : offset ? 2e-3 : 1e-5;
      const double rtol = dtype == DType::f64 ? 6e-8 : 1.3e-6;
      testing::check_matches(f.output, c.tensor("output"), "output", atol, rtol);
      testing::check_matches(g.grad_input, c.tensor("grad_input"), "grad_input", atol, rtol);
      if (affine) {
        testing::check_matches(g.grad_weight, c.tensor("grad_weight"), "grad_weight", atol, rtol);
        testing::check_matches(g.grad_bias, c.tensor("grad_bias"), "grad_bias", atol, rtol);
        CHECK(g.grad_weight.shape() == w.shape());
      } else {
        CHECK_FALSE(g.grad_weight.defined());
      }
    }
  }
}

TEST_CASE("group_norm / layer_norm: double reference on odd shapes, both layouts",
          "[ops][group_norm]") {
  struct Case {
    Shape shape;
    int64_t groups;
  };
  for (const Case& gc : {Case{{3, 6, 5, 7}, 3}, Case{{2, 4, 33}, 2}, Case{{7, 5}, 5},
                         Case{{2, 8, 1, 1}, 8}, Case{{1, 2, 40, 41}, 1}}) {
    INFO("group_norm shape " << gc.shape << " groups " << gc.groups);
    const int64_t C = gc.shape[1];
    for (DType dt : {DType::f32, DType::f64}) {
      const Tensor x = ops::add(randn(gc.shape, {.dtype = dt}), 3.0);
      const Tensor w = randn({C}, {.dtype = dt}), b = randn({C}, {.dtype = dt});
      const auto f = ops::group_norm_forward(x, gc.groups, w, b, {});
      const RefNorm r = reference(x, gc.groups, C / gc.groups, w.to_vector<double>(),
                                  b.to_vector<double>(), 1e-5);
      // f64: sums of <= 1640 values ~3 in lanes (chains of <= 128 additions): < 128 u |x| = 5e-14
      // on the mean, and the output |xhat w + b| < 20 within 1e-12. f32 (the same values): the
      // chains' 128 u relative typically sqrt(128) u, ~10 roundings per output, |y| < 10: about
      // 20 u * 10 = 1.2e-5 typical; torch's f32 atol 1e-5 holds here. rstd = 1/std ~1 of a
      // variance whose f32 sums of squares err ~sqrt(128) u relative: 10x that.
      const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
      CHECK(max_diff(f.output, r.out) < tol);
      CHECK(max_diff(f.save_mean, r.mean) < tol);
      CHECK(max_diff(f.save_rstd, r.rstd) < tol * 10);
    }
  }
  for (const Shape& shape : {Shape{5, 3}, Shape{4, 1030}, Shape{2, 3, 9, 17}}) {
    const Shape ns{shape.back()};
    INFO("layer_norm shape " << shape);
    for (DType dt : {DType::f32, DType::f64}) {
      const Tensor x = randn(shape, {.dtype = dt});
      const Tensor w = randn(ns, {.dtype = dt}), b = randn(ns, {.dtype = dt});
      const auto f = ops::layer_norm_forward(x, ns, w, b, {.eps = 1e-3});
      const int64_t rows = x.numel() / shape.back();
      const RefNorm r = reference(x.reshape({rows, shape.back()}), 1, shape.back(),
                                  w.to_vector<double>(), b.to_vector<double>(), 1e-3);
      CHECK(max_diff(f.output, r.out) < (dt == DType::f64 ? 1e-12 : 1e-5));  // as above
    }
  }
}

TEST_CASE(
    "group_norm / layer_norm: f32 backward against f64 over several row blocks, each "
    "gradient alone",
    "[ops][group_norm]") {
  // The f64 kernels are gradchecked (tests/autograd/test_group_norm_grad.cpp); these shapes span
  // the CPU backward's paths: rows of one value per channel in blocks of 64 rows (layer_norm
  // (130, 70): three blocks, the last short; group_norm of (150, 12) input, 3 groups of 4
  // channels), with and without weight, and spatial planes (group_norm (5, 6, 7, 9)).
  struct Case {
    Shape shape;
    int64_t groups;  // 0: layer_norm over the last dim
    bool affine;
  };
  for (const Case& c :
       {Case{{130, 70}, 0, true}, Case{{130, 70}, 0, false}, Case{{150, 12}, 3, true},
        Case{{5, 6, 7, 9}, 3, true}, Case{{5, 6, 7, 9}, 2, false}}) {
    INFO("shape " << c.shape << " groups " << c.groups << " affine " << c.affine);
    const int64_t C = c.groups ? c.shape[1] : c.shape.back();
    const Tensor x = ops::add(randn(c.shape, {.dtype = DType::f64}), 2.0);
    const Tensor dy = randn(c.shape, {.dtype = DType::f64});
    const Tensor w = c.affine ? randn({C}, {.dtype = DType::f64}) : Tensor();
    const Tensor b = c.affine ? randn({C}, {.dtype = DType::f64}) : Tensor();
    auto run = [&](const Tensor& xi, const Tensor& dyi, const Tensor& wi, const Tensor& bi,
                   std::array<bool, 3> mask) {
      if (c.groups) {
        const auto f = ops::group_norm_forward(xi, c.groups, wi, bi, {});
        return ops::group_norm_backward(dyi, xi, c.groups, wi, f.save_mean, f.save_rstd, mask);
      }
      const Shape ns{C};
      const auto f = ops::layer_norm_forward(xi, ns, wi, bi, {});
      return ops::layer_norm_backward(dyi, xi, ns, wi, f.save_mean, f.save_rstd, mask);
    };
    auto f32 = [](const Tensor& t) { return t.defined() ? t.to(DType::f32) : t; };
    const ops::GroupNormGrads ref = run(x, dy, w, b, {true, true, true});
    const ops::GroupNormGrads all = run(f32(x), f32(dy), f32(w), f32(b), {true, true, true});
    // Within f32 rounding of the largest value: the inputs' rounding to f32 (u |x|, |x| < 6)
    // enters xhat amplified by rstd (up to ~8 for the smallest spread among 450 groups of 4
    // values), about 50 u, plus ~10 roundings per term: < 64 u = 3.8e-6 of the largest gradient;
    // 2e-5 leaves 5x for the rstd of an unlucky draw (groups of 2 values, with rstd up to ~100,
    // are not tested: their f32 gradient is ill-conditioned).
    auto close = [](const Tensor& got, const Tensor& want) {
      const std::vector<double> v = want.to_vector<double>();
      double scale = 1;
      for (double e : v) scale = std::max(scale, std::abs(e));
      return max_diff(got, v) < 2e-5 * scale;
    };
    CHECK(close(all.grad_input, ref.grad_input));
    CHECK(close(all.grad_bias, ref.grad_bias));
    if (c.affine) CHECK(close(all.grad_weight, ref.grad_weight));
    for (int only = 0; only < 3; ++only) {
      std::array<bool, 3> mask{false, false, false};
      mask[static_cast<size_t>(only)] = true;
      const ops::GroupNormGrads one = run(f32(x), f32(dy), f32(w), f32(b), mask);
      const Tensor& got = only == 0 ? one.grad_input : only == 1 ? one.grad_weight : one.grad_bias;
      const Tensor& want = only == 0 ? all.grad_input : only == 1 ? all.grad_weight : all.grad_bias;
      CHECK(got.defined() == want.defined());
      // Exact: the backward computes the sums and each gradient in the same loops whichever
      // gradients are asked for (ops/cpu/group_norm.cpp), in blocks fixed by the shape.
      if (got.defined()) CHECK(got.to_vector<float>() == want.to_vector<float>());
      CHECK((only == 0 || !one.grad_input.defined()));
    }
  }
}

TEST_CASE("group_norm / layer_norm: f32 statistics of data far from zero stay accurate",
          "[ops][group_norm]") {
  // randn + 1e4 in f32: E[x^2] - E[x]^2 would lose ~1e-8 * 1e8 relative; the two-pass sums keep
  // the variance to ~1e-6 relative of the f64 result on the same values.
  const Tensor x64 =
      ops::add(randn({4, 3000}, {.dtype = DType::f64}), 1e4).to(DType::f32).to(DType::f64);
  const auto f64 = ops::layer_norm_forward(x64, {3000}, Tensor(), Tensor(), {});
  const auto f32 = ops::layer_norm_forward(x64.to(DType::f32), {3000}, Tensor(), Tensor(), {});
  const auto m64 = f64.save_mean.to_vector<double>(), m32 = f32.save_mean.to_vector<double>();
  const auto r64 = f64.save_rstd.to_vector<double>(), r32 = f32.save_rstd.to_vector<double>();
  for (size_t i = 0; i < m64.size(); ++i) {
    // The mean is stored in f32: half an ulp of 1e4 (4.9e-4) plus the f32 lane sums' error of
    // the correction sum (x - m), < 128 u * 3 * 3000 / 3000: 5e-4 in all.
    CHECK(std::abs(m32[i] - m64[i]) < 1e-3);
    // rstd from the second pass's sums of (x - m)^2 (values exact: x and m within a factor 2,
    // Sterbenz): chains of <= 128 f32 additions, typically sqrt(128) u = 6.7e-7 relative, and
    // rstd halves it.
    CHECK(std::abs(r32[i] / r64[i] - 1) < 1e-6);
  }
  // (x - m) * rstd with m off by < 5e-4 (above) and rstd ~1: 5e-4, and 4x for the kernel
  // folding the mean's correction into its shift in f32 (u * 1e4 = 6e-4): 2e-3.
  CHECK(max_abs_diff(f32.output, f64.output) < 2e-3);
}

TEST_CASE("group_norm / layer_norm: strided inputs and parameters", "[ops][group_norm]") {
  const Tensor base = randn({5, 4, 6}, {.dtype = DType::f64});
  const Tensor x = base.transpose(0, 2);  // (6, 4, 5), not contiguous
  const Tensor w = randn({8}, {.dtype = DType::f64}).slice(0, 0, 8, 2);  // stride 2
  const Tensor b = randn({4}, {.dtype = DType::f64});
  // Exact: the kernels make input and parameters contiguous before the same loops.
  CHECK(max_abs_diff(ops::group_norm(x, 2, w, b),
                     ops::group_norm(x.contiguous(), 2, w.contiguous(), b)) == 0);
  CHECK(max_abs_diff(ops::layer_norm(x, {4, 5}), ops::layer_norm(x.contiguous(), {4, 5})) == 0);
}

TEST_CASE("group_norm / layer_norm: argument errors name the op and the problem",
          "[ops][group_norm]") {
  const Tensor x = randn({2, 6, 3});
  CHECK_THROWS_WITH(
      ops::group_norm(x, 4),
      Catch::Contains("group_norm") && Catch::Contains("dividing the number of channels 6"));
  CHECK_THROWS_WITH(ops::group_norm(randn({6}), 2),
                    Catch::Contains("at least 2 dims") && Catch::Contains("[6]"));
  CHECK_THROWS_WITH(ops::group_norm(x, 3, randn({3})),
                    Catch::Contains("expected weight of shape [6], got [3]"));
  CHECK_THROWS_WITH(ops::layer_norm(x, {6}), Catch::Contains("layer_norm") &&
                                                 Catch::Contains("normalized_shape [6]") &&
                                                 Catch::Contains("[2, 6, 3]"));
  CHECK_THROWS_WITH(ops::layer_norm(x, {3}, Tensor(), randn({2})),
                    Catch::Contains("expected bias of shape [3], got [2]"));
  CHECK_THROWS_WITH(ops::layer_norm(x, {3}, randn({3}, {.dtype = DType::f64})),
                    Catch::Contains("weight"));
  CHECK_THROWS_WITH(ops::layer_norm(x, {3}, Tensor(), Tensor(), {.eps = -1}),
                    Catch::Contains("eps >= 0"));
  CHECK_THROWS_WITH(ops::layer_norm(zeros({2, 3}, {.dtype = DType::i64}), {3}),
                    Catch::Contains("layer_norm"));
}
