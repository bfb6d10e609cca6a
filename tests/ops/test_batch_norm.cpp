#include <catch2/catch.hpp>

#include <cmath>

#include "ops/batch_norm.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::max_abs_diff;

namespace {

// Naive training-mode batch norm in double over (N, C, S): output, batch mean and biased var.
struct RefBn {
  std::vector<double> out, mean, var;
};
RefBn reference_bn(const Tensor& x, const std::vector<double>& w, const std::vector<double>& b,
                   double eps) {
  const auto v = x.to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  RefBn r{std::vector<double>(v.size()), std::vector<double>(C), std::vector<double>(C)};
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) s += v[(n * C + c) * S + i];
    const double mean = s / double(N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) ss += std::pow(v[(n * C + c) * S + i] - mean, 2);
    const double var = ss / double(N * S);
    r.mean[c] = mean;
    r.var[c] = var;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * C + c) * S + i;
        r.out[k] = (v[k] - mean) / std::sqrt(var + eps) * w[c] + b[c];
      }
  }
  return r;
}

}  // namespace

TEST_CASE("batch_norm: PyTorch fixtures (output, running stats, gradients)", "[ops][batch_norm]") {
  const auto cases = testing::load_fixture(testing::fixture_path("batch_norm.txt"));
  REQUIRE(cases.size() == 4);
  for (const auto& c : cases) {
    INFO("case " << c.name);
    for (DType dtype : {DType::f32, DType::f64}) {
      const Tensor x = testing::to_tensor(c.tensor("input"), dtype);
      const Tensor w = testing::to_tensor(c.tensor("weight"), dtype);
      const Tensor b = testing::to_tensor(c.tensor("bias"), dtype);
      const Tensor rm = testing::to_tensor(c.tensor("running_mean_in"), dtype);
      const Tensor rv = testing::to_tensor(c.tensor("running_var_in"), dtype);
      const ops::BatchNormOptions o{.training = c.attr_int("training") != 0,
                                    .momentum = c.attr_double("momentum"),
                                    .eps = c.attr_double("eps")};
      const auto f = ops::batch_norm_forward(x, rm, rv, w, b, o);
      // f32: torch's own tolerance for f32 (assert_close: atol 1e-5, rtol 1.3e-6). f64: the
      // fixture's rounding to f32 (rtol 6e-8 >= 2^-24) and f64 sums of <= 90 values of
      // magnitude < 10 (atol 1e-12 > 90 * 2^-53 * 10 * 10).
      const double atol = dtype == DType::f32 ? 1e-5 : 1e-12;
      const double rtol = dtype == DType::f32 ? 1.3e-6 : 6e-8;
      testing::check_matches(f.output, c.tensor("output"), "output", atol, rtol);
      testing::check_matches(rm, c.tensor("running_mean_out"), "running_mean", atol, rtol);
      testing::check_matches(rv, c.tensor("running_var_out"), "running_var", atol, rtol);
      const auto g = ops::batch_norm_backward(testing::to_tensor(c.tensor("grad_out"), dtype), x, w,
                                              f.save_mean, f.save_invstd, o.training);
      testing::check_matches(g.grad_input, c.tensor("grad_input"), "grad_input", atol, rtol);
      testing::check_matches(g.grad_weight, c.tensor("grad_weight"), "grad_weight", atol, rtol);
      testing::check_matches(g.grad_bias, c.tensor("grad_bias"), "grad_bias", atol, rtol);
    }
  }
}

TEST_CASE("batch_norm: any number of spatial dims, (N, C) included", "[ops][batch_norm]") {
  for (const Shape& shape :
       {Shape{7, 5}, Shape{4, 3, 9}, Shape{2, 4, 3, 5, 6}, Shape{3, 2, 40, 7}}) {
    INFO("shape " << shape);
    const int64_t C = shape[1];
    const Tensor x = randn(shape, {.dtype = DType::f64});
    const Tensor w = randn({C}, {.dtype = DType::f64}), b = randn({C}, {.dtype = DType::f64});
    const RefBn ref = reference_bn(x, w.to_vector<double>(), b.to_vector<double>(), 1e-5);
    const auto f = ops::batch_norm_forward(x, Tensor(), Tensor(), w, b, {});
    // f64 against the f64 loop: each statistic sums <= 840 values in lanes (chains of <= 64
    // additions, then a few folds: <= 70 u of the sum of |x - first|, < 8 per value here), so
    // mean and variance are within ~70 * 2^-53 * 8 = 6e-14 (relative to a variance ~1), invstd
    // within half that, and |y| = |xhat w + b| < 20 within 1e-12 (both sides round).
    CHECK(max_abs_diff(f.output, from_vector(ref.out, shape, {.dtype = DType::f64})) < 1e-12);
    const auto mean = f.save_mean.to_vector<double>();
    for (int64_t c = 0; c < C; ++c) CHECK(mean[c] == Approx(ref.mean[c]).margin(1e-13));
    // f32 against the same double reference: the input's rounding to f32 (u |x| invstd |w|) and
    // the kernel's few roundings per element (scale, shift, product, sum) and its f32 lane sums
    // (invstd within ~35u): about 40 u (|y| + |b|) < 40 * 6e-8 * 4 = 1e-5 for |y|, |b| < 2 typical
    // of N(0, 1) weights; torch's f32 atol (assert_close) is the same 1e-5.
    const auto f32 = ops::batch_norm(x.to(DType::f32), Tensor(), Tensor(), w.to(DType::f32),
                                     b.to(DType::f32), {});
    CHECK(max_abs_diff(f32, from_vector(ref.out, shape, {.dtype = DType::f64})) < 1e-5);
  }
}

TEST_CASE("batch_norm: running statistics use the unbiased variance", "[ops][batch_norm]") {
  const Tensor x = randn({6, 3, 4, 4}, {.dtype = DType::f64});
  const Tensor rm = zeros({3}, {.dtype = DType::f64}), rv = ones({3}, {.dtype = DType::f64});
  const RefBn ref = reference_bn(x, {1, 1, 1}, {0, 0, 0}, 1e-5);
  ops::batch_norm(x, rm, rv, Tensor(), Tensor(), {.momentum = 0.25});
  const double M = 6 * 16;
  const auto m = rm.to_vector<double>(), v = rv.to_vector<double>();
  // f64 statistics of 96 values (< 70 u of sums of |x - first| < 8 each: 6e-14), then one
  // momentum update: 1e-13.
  for (int c = 0; c < 3; ++c) {
    CHECK(m[c] == Approx(0.25 * ref.mean[c]).margin(1e-13));
    CHECK(v[c] == Approx(0.75 + 0.25 * ref.var[c] * M / (M - 1)).margin(1e-13));
  }
  // Evaluation reads them and leaves them alone (exact: not written at all).
  const Tensor y = ops::batch_norm(x, rm, rv, Tensor(), Tensor(), {.training = false});
  CHECK(rm.to_vector<double>() == m);
  // A handful of f64 roundings of values < 10: 1e-14.
  const auto vx = x.to_vector<double>(), vy = y.to_vector<double>();
  CHECK(vy[0] == Approx((vx[0] - m[0]) / std::sqrt(v[0] + 1e-5)).margin(1e-14));
}

TEST_CASE("batch_norm: accurate in f32 when the mean is large against the spread",
          "[ops][batch_norm]") {
  // 1000 + noise of scale 0.01: the naive E[x^2] - E[x]^2 in f32 loses all digits here.
  Generator gen(7);
  auto v = randn({32, 2, 16, 16}, {.dtype = DType::f64}, &gen).to_vector<double>();
  for (double& e : v) e = 1000 + 0.01 * e;
  const Tensor x = from_vector(v, {32, 2, 16, 16}, {.dtype = DType::f32});
  const Tensor xd = x.to(DType::f64);
  const RefBn ref = reference_bn(xd, {1, 1}, {0, 0}, 1e-5);
  const auto f = ops::batch_norm_forward(x, Tensor(), Tensor(), Tensor(), Tensor(), {});
  // Normalizing around an input element (exact differences) rather than the f32-rounded mean
  // (off by up to 3e-5, times invstd ~100) keeps the output accurate: the differences x - first
  // are exact (Sterbenz), so the output carries the kernel's few roundings (~10 u |y|, |y| < 5)
  // and the variance's f32 lane sums (chains of 64: <= 64 u relative, typically 8 u): 1e-5.
  CHECK(max_abs_diff(f.output, from_vector(ref.out, x.shape(), {.dtype = DType::f64})) < 1e-5);
  // invstd: the shifted sum of squares s2 = sum (x - first)^2 runs in f32 lanes (chains of <= 64
  // additions: <= 64 u relative), and var = s2 / M - (mean - first)^2 cancels by the factor
  // (var + (mean - first)^2) / var; invstd halves the relative error, and adds ~4 roundings.
  const double shift = xd.to_vector<double>()[0] - ref.mean[0];  // channel 0: first - mean
  const double u = testing::unit_roundoff(DType::f32);
  const double rel = 32 * u * (1 + shift * shift / ref.var[0]) + 4 * u;
  const auto invstd = f.save_invstd.to_vector<double>();
  CHECK(invstd[0] == Approx(1 / std::sqrt(ref.var[0] + 1e-5)).epsilon(rel));
}

TEST_CASE("batch_norm: errors", "[ops][batch_norm]") {
  const Tensor x = randn({4, 3, 5});
  CHECK_THROWS_WITH(ops::batch_norm(x, Tensor(), Tensor(), randn({4}), Tensor(), {}),
                    Catch::Contains("batch_norm") && Catch::Contains("weight of shape [3]") &&
                        Catch::Contains("[4]"));
  CHECK_THROWS_WITH(
      ops::batch_norm(x, Tensor(), Tensor(), randn({3}, {.dtype = DType::f64}), Tensor(), {}),
      Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THROWS_WITH(ops::batch_norm(randn({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), {}),
                    Catch::Contains("more than 1 value per channel"));
  CHECK_THROWS_WITH(ops::batch_norm(randn({3}), Tensor(), Tensor(), Tensor(), Tensor(), {}),
                    Catch::Contains("at least 2 dims"));
  CHECK_THROWS_WITH(ops::batch_norm(x, zeros({3}), Tensor(), Tensor(), Tensor(), {}),
                    Catch::Contains("both defined"));
  // One sample is fine in evaluation.
  CHECK_NOTHROW(ops::batch_norm(randn({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(),
                                {.training = false}));
}

TEST_CASE("batch_norm: the fused ReLU equals relu(batch_norm) forward and backward, bit for bit",
          "[ops][batch_norm][relu]") {
  // S = 1 (channel-vectorized), S < 16 (short rows), S >= 16 (lane sums); f32 and f64; training
  // with running statistics, training without, and evaluation.
  for (const Shape& shape : {Shape{9, 5}, Shape{4, 3, 3, 3}, Shape{3, 4, 7, 5}})
    for (DType dt : {DType::f32, DType::f64})
      for (int mode = 0; mode < 3; ++mode) {
        INFO("shape " << shape << " " << dt << " mode " << mode);
        Generator g(7);
        const int64_t C = shape[1];
        const Tensor x = randn(shape, {.dtype = dt}, &g), dz = randn(shape, {.dtype = dt}, &g);
        const Tensor w = randn({C}, {.dtype = dt}, &g), b = randn({C}, {.dtype = dt}, &g);
        Tensor rm1 = randn({C}, {.dtype = dt}, &g), rv1 = rand({C}, {.dtype = dt}, &g);
        Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
        const bool running = mode != 1;
        BatchNormOptions o{.training = mode != 2};
        const ops::BatchNormForward plain =
            ops::batch_norm_forward(x, running ? rm1 : Tensor(), running ? rv1 : Tensor(), w, b, o);
        o.relu = true;
        const ops::BatchNormForward fused =
            ops::batch_norm_forward(x, running ? rm2 : Tensor(), running ? rv2 : Tensor(), w, b, o);
        const Tensor z = ops::relu(plain.output);
        // Exact, forward and backward: the fused kernels are the unfused ones with ReLU as a
        // select in the epilogue (forward: relu's own v < 0 ? 0 : v on the same affine value) or
        // in the sums' loads (backward: mask > 0 ? dy : 0, relu_backward's select, on the same
        // values): the same IEEE operations in the same order, which -ffp-contract=off keeps from
        // being fused differently on either side (issue 37: GCC contracted them differently for
        // -march=rocketlake).
        CHECK(fused.output.to_vector<double>() == z.to_vector<double>());
        CHECK(rm2.to_vector<double>() == rm1.to_vector<double>());
        CHECK(rv2.to_vector<double>() == rv1.to_vector<double>());
        // Some outputs clipped, some not: the mask matters.
        const auto zv = z.to_vector<double>();
        CHECK(std::count(zv.begin(), zv.end(), 0.0) > 0);
        CHECK(std::count(zv.begin(), zv.end(), 0.0) < static_cast<long>(zv.size()));
        // The unfused chain: ReLU's backward (dz where z > 0), then batch norm's backward.
        const bool batch_stats = mode != 2;
        const Tensor dy = ops::relu_backward(dz, z);
        const ops::BatchNormGrads want =
            ops::batch_norm_backward(dy, x, w, plain.save_mean, plain.save_invstd, batch_stats);
        const ops::BatchNormGrads got =
            ops::batch_norm_backward(dz, x, w, fused.save_mean, fused.save_invstd, batch_stats,
                                     {true, true, true}, fused.output);
        CHECK(got.grad_input.to_vector<double>() == want.grad_input.to_vector<double>());
        CHECK(got.grad_weight.to_vector<double>() == want.grad_weight.to_vector<double>());
        CHECK(got.grad_bias.to_vector<double>() == want.grad_bias.to_vector<double>());
      }
  const Tensor x = randn({4, 3, 2, 2});
  const ops::BatchNormForward f =
      ops::batch_norm_forward(x, Tensor(), Tensor(), Tensor(), Tensor(), {.relu = true});
  CHECK_THROWS_WITH(ops::batch_norm_backward(x, x, Tensor(), f.save_mean, f.save_invstd, true,
                                             {true, true, true}, f.output.narrow(0, 0, 2)),
                    Catch::Contains("batch_norm_backward") &&
                        Catch::Contains("expected relu_output of the input's shape and dtype"));
}
