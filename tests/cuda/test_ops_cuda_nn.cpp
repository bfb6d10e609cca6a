// Pooling, batch norm and dropout on "cuda" tensors (emulated here) against the CPU ops on the
// same inputs: values, gradients through autograd, running statistics, dropout masks bit for bit,
// and the error messages.
#include <catch2/catch.hpp>

#include <functional>

#include "nn/models/models.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

namespace {

// u of a half dtype: a result the device computes in f32 and rounds to it once is within u |y| of
// its f32 value (bf16 2^-8, f16 2^-11; 0 for f32).
double low_u(DType dtype) {
  return dtype == DType::bf16 ? 0x1p-8 : dtype == DType::f16 ? 0x1p-11 : 0.0;
}

// Tolerances of a normalization (batch norm: one row per channel; group norm: per (sample,
// group); layer norm: per row), device against CPU, from the data (f64 magnitudes on the CPU).
// `rows` is x viewed as one row of K values per statistic and `gy_rows` the output gradient in
// the same layout; w_max, b_max bound the affine parameters; out and gx are the CPU's output and
// input gradient. Each statistic is a sum of K values in another order: the mean within
// sum_tol(K, sum |x|) / K; the variance (one- or two-pass) within sum_tol(K, sum x^2) / K plus
// 2 |mean| times the mean's; invstd = (var + eps)^-1/2 within half the variance's relative error
// plus two roundings (4u). Then a few roundings per element: y = (x - m) invstd w + b within
// |w| d_xhat + 4u (|y| + |b|), d_xhat = |x - m| d_invstd + invstd d_mean. The input gradient
// invstd w / K (K gy - sum gy - xhat sum gy xhat): the two row sums (sum_tol, signed_sum_tol)
// and xhat's error through them, gx's relative invstd error, and 8u |gx|.
struct NormTol {
  double mean, var, invstd, output, grad_input, d_xhat, invstd_max;
};
NormTol norm_tol(const Tensor& rows, double eps, double w_max, double b_max, const Tensor& out,
                 const Tensor& gy_rows, const Tensor& gx) {
  const Tensor r = rows.to(DType::f64), g = gy_rows.to(DType::f64);
  const int64_t k = r.size(1);
  const double kd = static_cast<double>(k);
  const Tensor m = ops::mean(r, {1}, true);
  const Tensor dev = ops::sub(r, m);
  const Tensor var = ops::mean(ops::mul(dev, dev), {1});
  const double m_max = max_abs(m), var_max = max_abs(var);
  const double var_min = 1 / max_abs(ops::div(1.0, var));
  const double d_mean = sum_tol(k, max_abs(ops::sum(ops::abs(r), {1}))) / kd + 2 * kU * m_max;
  const double d_var = sum_tol(k, max_abs(ops::sum(ops::mul(r, r), {1}))) / kd +
                       2 * m_max * d_mean + 2 * kU * var_max;
  const double invstd_max = 1 / std::sqrt(var_min + eps);
  const double rel_invstd = 0.5 * d_var / (var_min + eps) + 4 * kU;
  NormTol t;
  t.mean = d_mean;
  t.var = d_var;
  t.invstd_max = invstd_max;
  t.invstd = rel_invstd * invstd_max;
  const double dev_max = max_abs(dev), xhat_max = dev_max * invstd_max;
  t.d_xhat = dev_max * t.invstd + invstd_max * d_mean;
  t.output = w_max * t.d_xhat + 4 * kU * (max_abs(out) + b_max);
  const double gy_abs = max_abs(ops::sum(ops::abs(g), {1}));
  const double gy_sq = max_abs(ops::sum(ops::mul(g, g), {1}));
  const double d_sum_gy = sum_tol(k, gy_abs);
  const double d_sum_gyx = xhat_max * signed_sum_tol(k, gy_sq) + gy_abs * t.d_xhat;
  t.grad_input = invstd_max * std::max(w_max, 1.0) / kd *
                     (d_sum_gy + xhat_max * d_sum_gyx + t.d_xhat * xhat_max * gy_abs) +
                 max_abs(gx) * (rel_invstd + 8 * kU);
  return t;
}

// The weight and bias gradients' tolerances: sums of K' terms per weight (gy and gy xhat, xhat
// from the CPU's normalized x) in other orders, plus xhat's error d_xhat times sum |gy|.
std::pair<double, double> affine_grad_tol(const Tensor& gy, const Tensor& xhat,
                                          const std::vector<int64_t>& dims, double d_xhat) {
  const Tensor g = gy.to(DType::f64), xh = xhat.to(DType::f64);
  const int64_t k = gy.numel() / ops::sum(g, dims).numel();
  const double gy_abs = max_abs(ops::sum(ops::abs(g), dims));
  const Tensor gx = ops::mul(g, xh);
  return {signed_sum_tol(k, max_abs(ops::sum(ops::mul(gx, gx), dims))) + gy_abs * d_xhat,
          sum_tol(k, gy_abs)};
}

}  // namespace

TEST_CASE("cuda ops: max/avg pooling forward and backward match the CPU", "[ops_cuda_nn]") {
  struct Case {
    Shape shape;
    Pool2dOptions options;
  };
  const std::vector<Case> cases = {
      {{2, 3, 8, 8}, {.kernel_size = {2, 2}}},
      {{1, 2, 7, 9}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {{2, 1, 5, 6}, {.kernel_size = {2, 3}, .stride = {2, 2}, .ceil_mode = true}},
      {{3, 10, 11}, {.kernel_size = {3, 3}, .stride = {1, 2}, .padding = {1, 0}}},
      {{1, 2, 6, 6},
       {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false}},
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& [shape, options] = cases[i];
      INFO("case " << i << " " << dtype);
      const Tensor x = rand_cpu(shape, 10 + i).to(dtype).to(DType::f32);  // representable
      const Tensor d = x.to(kCuda).to(dtype);
      const auto want = ops::max_pool2d_with_indices(x, options);
      const auto got = ops::max_pool2d_with_indices(d, options);
      CHECK(max_diff(got.output, want.output) == 0);  // max of representable values is exact
      CHECK(max_diff(got.indices, want.indices) == 0);
      CHECK(got.output.dtype() == dtype);
      const Tensor gy = rand_cpu(want.output.shape(), 50 + i);
      const Tensor gx = ops::max_pool2d_backward(gy.to(dtype).to(DType::f32), want.indices, shape);
      // With the forward's window (a local gather) and without it (every output scanned): bit
      // for bit, rounded once to the dtype. Both kernels add an input's gradients in f32 in the
      // CPU scatter's order (outputs row by row, cuda/kernels/pool.cu and ops/cpu/pool.cpp).
      CHECK(max_diff(ops::max_pool2d_backward(gy.to(kCuda).to(dtype), got.indices, shape, options),
                     gx.to(dtype)) == 0);
      CHECK(max_diff(ops::max_pool2d_backward(gy.to(kCuda).to(dtype), got.indices, shape),
                     gx.to(dtype)) == 0);
      // Average pooling: bit for bit, then rounded once to the dtype (the kernels add in the
      // CPU's order, tests/cuda/test_kernels_pool.cpp says how); the backward from the gradient
      // rounded to the dtype as the device reads it.
      const Tensor ya = ops::avg_pool2d(x, options);
      CHECK(max_diff(ops::avg_pool2d(d, options), ya.to(dtype)) == 0);
      const Tensor ga = rand_cpu(ya.shape(), 70 + i).to(dtype).to(DType::f32);
      CHECK(max_diff(ops::avg_pool2d_backward(ga.to(kCuda).to(dtype), shape, options),
                     ops::avg_pool2d_backward(ga, shape, options).to(dtype)) == 0);
    }
  }
}

TEST_CASE("cuda ops: adaptive average pooling matches the CPU", "[ops_cuda_nn]") {
  for (auto [shape, out] : std::vector<std::pair<Shape, std::array<int64_t, 2>>>{
           {{2, 3, 7, 7}, {1, 1}}, {{1, 2, 10, 9}, {3, 4}}, {{4, 5, 6}, {6, 2}}}) {
    const Tensor x = rand_cpu(shape, 3);
    const Tensor y = ops::adaptive_avg_pool2d(x, out);
    // Bit for bit: the same sums in the same order (see avg pooling above).
    CHECK(max_diff(ops::adaptive_avg_pool2d(x.to(kCuda), out), y) == 0);
    const Tensor gy = rand_cpu(y.shape(), 4);
    CHECK(max_diff(ops::adaptive_avg_pool2d_backward(gy.to(kCuda), shape),
                   ops::adaptive_avg_pool2d_backward(gy, shape)) == 0);
  }
}

TEST_CASE("cuda ops: batch norm training, evaluation and backward match the CPU", "[ops_cuda_nn]") {
  for (const Shape& shape : {Shape{4, 3, 5, 6}, Shape{7, 5}, Shape{2, 4, 9}}) {
    INFO(shape);
    const int64_t C = shape[1];
    const Tensor x = ops::add(ops::mul(rand_cpu(shape, 1), 2.0), 0.5);
    const Tensor w = rand_cpu({C}, 2), b = rand_cpu({C}, 3);
    Tensor rm = rand_cpu({C}, 4), rv = ops::add(ops::abs(rand_cpu({C}, 5)), 0.5);
    Tensor drm = rm.to(kCuda), drv = rv.to(kCuda);
    const BatchNormOptions train{.training = true, .momentum = 0.2, .eps = 1e-3};
    const Tensor rm0 = rm.clone(), rv0 = rv.clone();
    const auto want = ops::batch_norm_forward(x, rm, rv, w, b, train);
    const auto got =
        ops::batch_norm_forward(x.to(kCuda), drm, drv, w.to(kCuda), b.to(kCuda), train);
    const Tensor gy = rand_cpu(shape, 6);
    const auto rows = [&](const Tensor& t) { return t.transpose(0, 1).reshape({C, -1}); };
    const auto gw_train =
        ops::batch_norm_backward(gy, x, w, want.save_mean, want.save_invstd, true);
    const NormTol t =
        norm_tol(rows(x), 1e-3, max_abs(w), max_abs(b), want.output, rows(gy), gw_train.grad_input);
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < static_cast<int64_t>(shape.size()); ++d) dims.push_back(d);
    const Tensor xhat = ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), {});
    const auto [w_tol, b_tol] = affine_grad_tol(gy, xhat, dims, t.d_xhat);
    CHECK(max_diff(got.output, want.output) < t.output);
    CHECK(max_diff(got.save_mean, want.save_mean) < t.mean);
    CHECK(max_diff(got.save_invstd, want.save_invstd) < t.invstd);
    // Running statistics updated in place alike: 0.2 of the batch's (the variance unbiased, K /
    // (K - 1) times the biased one's error) plus the blend's roundings.
    const double kr = static_cast<double>(x.numel() / C);
    CHECK(max_diff(drm, rm) < 0.2 * t.mean + 4 * kU * (max_abs(rm) + max_abs(rm0)));
    CHECK(max_diff(drv, rv) < 0.2 * t.var * kr / (kr - 1) + 4 * kU * (max_abs(rv) + max_abs(rv0)));
    for (bool training : {true, false}) {
      const auto gw =
          ops::batch_norm_backward(gy, x, w, want.save_mean, want.save_invstd, training);
      const auto gg = ops::batch_norm_backward(gy.to(kCuda), x.to(kCuda), w.to(kCuda),
                                               got.save_mean, got.save_invstd, training);
      // Evaluation's gy invstd w differs by the statistics' errors only: within the training
      // formula's bound.
      CHECK(max_diff(gg.grad_input, gw.grad_input) < t.grad_input);
      CHECK(max_diff(gg.grad_weight, gw.grad_weight) < w_tol);
      CHECK(max_diff(gg.grad_bias, gw.grad_bias) < b_tol);
    }
    // Only the input gradient asked for: the others stay undefined.
    const auto only = ops::batch_norm_backward(gy.to(kCuda), x.to(kCuda), Tensor(), got.save_mean,
                                               got.save_invstd, true, {true, false, false});
    CHECK_FALSE(only.grad_weight.defined());
    const Tensor gx_plain = ops::batch_norm_backward(gy, x, Tensor(), want.save_mean,
                                                     want.save_invstd, true, {true, false, false})
                                .grad_input;
    CHECK(max_diff(only.grad_input, gx_plain) <
          norm_tol(rows(x), 1e-3, 1.0, 0.0, want.output, rows(gy), gx_plain).grad_input);
    const BatchNormOptions eval{.training = false, .eps = 1e-3};
    // (x - rm) / sqrt(rv + eps) w + b on both sides' running statistics (rv >= 0.5: invstd <=
    // 1.42), which differ by their bounds above, plus four roundings of |y|.
    const Tensor y_eval = ops::batch_norm(x, rm, rv, w, b, eval);
    const double d_rm = 0.2 * t.mean + 4 * kU * (max_abs(rm) + max_abs(rm0));
    const double d_rv = 0.2 * t.var * kr / (kr - 1) + 4 * kU * (max_abs(rv) + max_abs(rv0));
    const double dev_eval = max_abs(x) + max_abs(rm);
    CHECK(max_diff(ops::batch_norm(x.to(kCuda), drm, drv, w.to(kCuda), b.to(kCuda), eval), y_eval) <
          max_abs(w) * (1.42 * d_rm + dev_eval * 0.5 * 2.9 * d_rv) +
              8 * kU * (max_abs(y_eval) + max_abs(b)));
    // No running statistics, no affine parameters: batch statistics in both modes.
    CHECK(max_diff(ops::batch_norm(x.to(kCuda), Tensor(), Tensor(), Tensor(), Tensor(), eval),
                   ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), eval)) <
          norm_tol(rows(x), 1e-3, 1.0, 0.0, xhat, rows(gy), gx_plain).output);
  }
}

TEST_CASE("cuda ops: half batch norm keeps f32 statistics", "[ops_cuda_nn]") {
  const Tensor x = rand_cpu({8, 4, 3, 3}, 7);
  const Tensor w = rand_cpu({4}, 8), b = rand_cpu({4}, 9);
  Tensor rm = zeros({4}), rv = ones({4});
  Tensor drm = rm.to(kCuda), drv = rv.to(kCuda);
  const auto want = ops::batch_norm_forward(x.to(DType::f16).to(DType::f32), rm, rv, w, b, {});
  const auto got =
      ops::batch_norm_forward(x.to(kCuda).to(DType::f16), drm, drv, w.to(kCuda), b.to(kCuda), {});
  CHECK(got.output.dtype() == DType::f16);
  CHECK(got.save_mean.dtype() == DType::f32);
  // The f32 bounds of the normalization, and the output's rounding to f16 (u = 2^-11); the
  // running mean moves by 0.1 of the batch mean (BatchNormOptions' default momentum).
  const Tensor xr = x.to(DType::f16).to(DType::f32);
  const Tensor rows = xr.transpose(0, 1).reshape({4, -1});
  const NormTol t = norm_tol(rows, 1e-5, max_abs(w), max_abs(b), want.output, rows, xr);
  CHECK(max_diff(got.output, want.output) < t.output + 0x1p-11 * max_abs(want.output));
  CHECK(max_diff(drm, rm) < 0.1 * t.mean + 4 * kU * max_abs(rm));
  CHECK_THROWS_WITH(ops::batch_norm(x.to(kCuda).to(DType::f16), Tensor(), Tensor(),
                                    w.to(kCuda).to(DType::f16), Tensor(), {}),
                    Catch::Contains("stoke::batch_norm") && Catch::Contains("weight of dtype f32"));
}

TEST_CASE("cuda ops: dropout draws the CPU's mask from the same generator state", "[ops_cuda_nn]") {
  for (int64_t n : {1, 7, 64, 1001}) {
    const Tensor x = rand_cpu({n}, 11);
    Generator g1(42), g2(42);
    const auto want = ops::dropout_with_mask(x, 0.3, &g1);
    const auto got = ops::dropout_with_mask(x.to(kCuda), 0.3, &g2);
    // Bit for bit: the mask is the same Philox integers against the same threshold, the output
    // x * fl(1 / (1 - p)) one IEEE product (cuda/kernels/dropout.cu, ops/cpu/dropout.cpp), the
    // backward g * mask * scale in the same order on both.
    CHECK(max_diff(got.mask, want.mask) == 0);
    CHECK(max_diff(got.output, want.output) == 0);
    CHECK(g1.state().offset == g2.state().offset);  // both advanced alike
    const Tensor gy = rand_cpu({n}, 12);
    CHECK(max_diff(ops::dropout_backward(gy.to(kCuda), got.mask, 0.3),
                   ops::dropout_backward(gy, want.mask, 0.3)) == 0);
  }
  const Tensor d = rand_cpu({5}, 1).to(kCuda);
  CHECK(ops::dropout(d, 1.0, true).device() == kCuda);
  CHECK(max_diff(ops::dropout(d, 1.0, true), zeros({5})) == 0);
  CHECK_THROWS_WITH(ops::dropout(d, 1.5, true), Catch::Contains("probability p in [0, 1]"));
}

TEST_CASE("cuda ops: autograd through pooling, batch norm and dropout matches the CPU",
          "[ops_cuda_nn]") {
  const Tensor x0 = rand_cpu({2, 3, 6, 6}, 21), w0 = rand_cpu({3}, 22), b0 = rand_cpu({3}, 23);
  auto run = [&](Device dev) {
    Tensor x = x0.to(dev).detach(), w = w0.to(dev).detach(), b = b0.to(dev).detach();
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    Generator g(5);
    Tensor h = batch_norm(x, Tensor(), Tensor(), w, b, {});
    h = max_pool2d(h, {.kernel_size = {2, 2}});
    h = avg_pool2d(h, {.kernel_size = {3, 3}, .padding = {1, 1}});
    h = dropout(h, 0.25, true, &g);
    h = adaptive_avg_pool2d(h, {1, 1});
    stoke::sum(stoke::mul(h, h)).backward();
    return std::vector<Tensor>{x.grad(), w.grad(), b.grad()};
  };
  const auto want = run(Device::cpu());
  const auto got = run(kCuda);
  // Batch norm's gradient (norm_tol's, ~1e-5 here) passed back through max pooling (a
  // selection), 3x3 average pooling and the mean over 9 positions (sum_tol of <= 9 terms each),
  // dropout (exact) and 2h: well under 1e-4.
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("grad " << i);
    CHECK(got[i].device() == kCuda);
    CHECK(max_diff(got[i], want[i]) < 1e-4);
  }
}

TEST_CASE("cuda ops: pooling refuses bad input with the CPU's messages", "[ops_cuda_nn]") {
  const Tensor x = rand_cpu({1, 1, 3, 3}, 1);
  for (const Tensor& t : {x, x.to(kCuda)}) {
    CHECK_THROWS_WITH(ops::max_pool2d(t, {.kernel_size = {5, 5}}),
                      Catch::Contains("stoke::max_pool2d") && Catch::Contains("too small"));
    CHECK_THROWS_WITH(ops::avg_pool2d(t, {.kernel_size = {2, 2}, .padding = {2, 2}}),
                      Catch::Contains("at most half the kernel size"));
  }
  CHECK_THROWS_WITH(ops::max_pool2d(x.to(kCuda).to(DType::f64), {.kernel_size = {2, 2}}),
                    Catch::Contains("stoke::max_pool2d") && Catch::Contains("f64"));
}

TEST_CASE("cuda ops: autograd through a scalar divided by a tensor", "[ops_cuda_nn]") {
  const Tensor x0 = ops::add(ops::abs(rand_cpu({3, 4}, 1)), 0.5);
  auto run = [&](Device dev) {
    Tensor x = x0.to(dev).detach();
    x.set_requires_grad(true);
    stoke::sum(stoke::div(2.0, x)).backward();
    return x.grad();
  };
  // -2 / x^2 (x >= 0.5, so |grad| <= 8), ~3 roundings each side: 2 x 3u x 8 = 2.9e-6.
  CHECK(max_diff(run(kCuda), run(Device::cpu())) < 48 * kU);
}

TEST_CASE("cuda ops: one-sample conv2d and pooling, dense and class-weighted losses match the CPU",
          "[ops_cuda_nn]") {
  const Tensor x0 = rand_cpu({3, 7, 6}, 31), w0 = rand_cpu({4, 3, 3, 3}, 32);
  const Tensor logits0 = rand_cpu({2, 5, 3, 2}, 33),
               cw = ops::add(ops::abs(rand_cpu({5}, 34)), 0.1);
  const Tensor target = from_vector<int64_t>({0, 4, 2, -100, 1, 3, 3, 2, 0, 1, 4, -100}, {2, 3, 2},
                                             {.dtype = DType::i64});
  auto run = [&](Device dev) {
    Tensor x = x0.to(dev).detach(), w = w0.to(dev).detach(), l = logits0.to(dev).detach();
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    l.set_requires_grad(true);
    const Tensor t = target.to(dev);
    Tensor h = max_pool2d(conv2d(x, w, Tensor(), {.padding = {1, 1}}), {.kernel_size = {2, 2}});
    const Tensor weighted = cross_entropy(l, t, {.label_smoothing = 0.1, .weight = cw.to(dev)});
    const Tensor dense_rows = cross_entropy(l, t, {.reduction = Reduction::none});
    const Tensor nll = nll_loss(log_softmax(l, 1), t, {.weight = cw.to(dev)});
    stoke::add(stoke::add(stoke::sum(stoke::mul(h, h)), weighted),
               stoke::add(stoke::sum(dense_rows), nll))
        .backward();
    return std::vector<Tensor>{h, weighted, dense_rows, nll, x.grad(), w.grad(), l.grad()};
  };
  const auto want = run(Device::cpu());
  const auto got = run(kCuda);
  CHECK(got[0].shape() == Shape{4, 3, 3});
  CHECK(got[2].shape() == Shape{2, 3, 2});
  // The conv's outputs sum 27 products (signed_sum_tol(27, 27 x 16) = 2.2e-5 at |x w| <= 4);
  // h^2's sum and the losses' (softmax sums of 5, means over <= 12 rows) stay within a few
  // 1e-5 of their O(10) values; the gradients sum 2h x over <= 36 positions likewise: 1e-4.
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("result " << i);
    CHECK(got[i].device() == kCuda);
    CHECK(max_diff(got[i], want[i]) < 1e-4);
  }
  // A bad target in the weighted path is reported with the loss's name (at the read-back).
  const Tensor bad = from_vector<int64_t>({0, 7}, {2}, {.dtype = DType::i64}).to(kCuda);
  CHECK_THROWS_WITH(
      cross_entropy(rand_cpu({2, 5}, 35).to(kCuda), bad, {.weight = cw.to(kCuda)}).item(),
      Catch::Contains("cross_entropy") && Catch::Contains("target 7"));
}

TEST_CASE("cuda ops: group_norm and layer_norm forward and backward through autograd match the CPU",
          "[ops_cuda_nn]") {
  struct Case {
    Shape shape;
    int64_t groups;  // 0: layer_norm over the last dim
  };
  for (const Case& c : {Case{{4, 6, 5, 3}, 3}, Case{{3, 4}, 2}, Case{{2, 3, 40}, 0}}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      INFO(c.shape << " groups " << c.groups << " " << dtype);
      const int64_t P = c.groups ? c.shape[1] : c.shape.back();
      const Tensor x0 = ops::add(rand_cpu(c.shape, 31), 2.0).to(dtype).to(DType::f32);
      const Tensor w0 = rand_cpu({P}, 32), b0 = rand_cpu({P}, 33), gy = rand_cpu(c.shape, 34);
      auto run = [&](Device dev, DType dt) {
        Tensor x = x0.to(dev).to(dt).detach(), w = w0.to(dev).detach(), b = b0.to(dev).detach();
        x.set_requires_grad(true);
        w.set_requires_grad(true);
        b.set_requires_grad(true);
        const Tensor y = c.groups ? group_norm(x, c.groups, w, b) : layer_norm(x, {P}, w, b);
        y.backward(gy.to(dt).to(dev));
        return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
      };
      const auto want = run(Device::cpu(), DType::f32);
      const auto got = run(kCuda, dtype);
      CHECK(got[0].dtype() == dtype);
      CHECK(got[2].dtype() == DType::f32);  // per-channel values stay f32
      // norm_tol's f32 bounds over the statistics' rows ((sample, group) or a layer norm row);
      // in f16/bf16 the device also rounds y and the input gradient once (u_low |.|) and reads gy
      // rounded (u_low |gy| each): through invstd |w| (gy - mean gy - xhat mean(gy xhat)) at most
      // u_low invstd |w| max|gy| (2 + xhat^2), through the weight and bias sums u_low sum |gy
      // xhat| and u_low sum |gy|.
      const Tensor rows = c.groups ? x0.reshape({c.shape[0] * c.groups, -1}) : x0.reshape({-1, P});
      const Tensor gy_rows =
          c.groups ? gy.reshape({c.shape[0] * c.groups, -1}) : gy.reshape({-1, P});
      const double w_max = max_abs(w0), gy_max = max_abs(gy), u_low = low_u(dtype);
      const NormTol t = norm_tol(rows, 1e-5, w_max, max_abs(b0), want[0], gy_rows, want[1]);
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < static_cast<int64_t>(c.shape.size()); ++d)
        if (d != (c.groups ? 1 : static_cast<int64_t>(c.shape.size()) - 1)) dims.push_back(d);
      const Tensor xhat = c.groups ? ops::group_norm(x0, c.groups) : ops::layer_norm(x0, {P});
      const auto [w_tol, b_tol] = affine_grad_tol(gy, xhat, dims, t.d_xhat);
      const double xhat_max = max_abs(xhat), invstd_max = t.invstd_max;
      const double k_w = static_cast<double>(gy.numel() / P);
      CHECK(max_diff(got[0], want[0]) < t.output + u_low * max_abs(want[0]));
      CHECK(max_diff(got[1], want[1]) <
            t.grad_input + u_low * (max_abs(want[1]) +
                                    invstd_max * w_max * gy_max * (2 + xhat_max * xhat_max)));
      CHECK(max_diff(got[2], want[2]) < w_tol + u_low * k_w * gy_max * xhat_max);
      CHECK(max_diff(got[3], want[3]) < b_tol + u_low * k_w * gy_max);
    }
  }
  CHECK_THROWS_WITH(ops::group_norm(rand_cpu({2, 4, 3}, 1).to(kCuda).to(DType::f16), 2,
                                    rand_cpu({4}, 2).to(kCuda).to(DType::f16)),
                    Catch::Contains("group_norm") && Catch::Contains("weight of dtype f32"));
}

TEST_CASE("cuda ops: drop_path and dropout2d draw the CPU's noise from the same generator state",
          "[ops_cuda_nn]") {
  const Tensor x = ops::add(rand_cpu({16, 5, 3, 3}, 41), 2.0);
  for (bool path : {true, false}) {
    Generator g1(42), g2(42);
    const Tensor want =
        path ? ops::drop_path(x, 0.4, true, &g1) : ops::dropout2d(x, 0.4, true, &g1);
    const Tensor got = path ? ops::drop_path(x.to(kCuda), 0.4, true, &g2)
                            : ops::dropout2d(x.to(kCuda), 0.4, true, &g2);
    CHECK(got.device() == kCuda);
    // Bit for bit: the same noise (0 or fl(1 / (1 - p)), from the same generator state) and one
    // IEEE product per element.
    CHECK(max_diff(got, want) == 0);
  }
  CHECK(max_diff(ops::drop_path(x.to(kCuda), 1.0, true), zeros(x.shape())) == 0);
}

TEST_CASE("cuda ops: the elementwise losses, logsumexp and std through autograd match the CPU",
          "[ops_cuda_nn]") {
  const Tensor x0 = rand_cpu({5, 7}, 41), t0 = rand_cpu({5, 7}, 42);
  const Tensor p0 = ops::add(ops::mul(ops::abs(rand_cpu({5, 7}, 43)), 0.2), 0.3);  // in (0, 1)
  const Tensor w0 = ops::add(ops::abs(rand_cpu({7}, 44)), 0.5);
  using Fn = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
  const std::vector<std::pair<const char*, Fn>> losses = {
      {"l1", [](auto& x, auto& t, auto&) { return l1_loss(x, t); }},
      {"smooth_l1",
       [](auto& x, auto& t, auto&) { return smooth_l1_loss(x, t, Reduction::sum, 0.5); }},
      {"kl_div",
       [](auto& x, auto&, auto& p) {
         return kl_div(log_softmax(x, 1), p, {.reduction = KlDivReduction::batchmean});
       }},
      {"bce", [](auto& x, auto&, auto& p) { return binary_cross_entropy(sigmoid(x), p); }},
      {"bce_with_logits",
       [&](auto& x, auto&, auto& p) {
         const Tensor w = w0.to(x.device());
         return binary_cross_entropy_with_logits(x, p, {.weight = w, .pos_weight = w});
       }},
      {"logsumexp",
       [](auto& x, auto& t, auto&) { return sum(logsumexp(x * 30.0, {1}) * sum(t, {1})); }},
      {"std", [](auto& x, auto& t, auto&) { return sum(stoke::std(x, {0}, 1, true) * t); }},
  };
  for (const auto& [name, fn] : losses) {
    INFO(name);
    const auto& f = fn;  // clang 14 cannot capture a structured binding
    auto run = [&](Device dev) {
      Tensor x = x0.to(dev).detach(), t = t0.to(dev).detach(), p = p0.to(dev).detach();
      x.set_requires_grad(true);
      p.set_requires_grad(true);
      const Tensor loss = f(x, t, p);
      loss.backward();
      return std::vector<Tensor>{loss, x.grad(), p.grad().defined() ? p.grad() : zeros_like(p)};
    };
    const auto want = run(Device::cpu());
    const auto got = run(kCuda);
    CHECK(got[0].device() == kCuda);
    // Sums of 35 terms (or 7-term rows) of |.| <= 8, each through a few roundings and the
    // transcendentals' few ulp (exp, log, log1p): sum_tol(35, 280) = 2e-5 for the losses; the
    // largest, logsumexp(30 x) x sum(t), scales its ~10u relative error by |30 x| sum|t| <= 120
    // x 7 at the gradient: 5e-5. Under 1e-4 for all.
    CHECK(max_diff(got[0], want[0]) < 1e-4);
    CHECK(max_diff(got[1], want[1]) < 1e-4);
    CHECK(max_diff(got[2], want[2]) < 1e-4);
  }
}

TEST_CASE("cuda ops: a ConvNeXt forward and backward match the CPU", "[ops_cuda_nn][models]") {
  // A small ConvNeXt (the model class of convnext_nano/tiny: patchify stem, depthwise 7x7,
  // channels-last LayerNorm and Linear, GELU, layer scale, LayerNorm2d downsampling): the full
  // models take minutes in the emulator. EfficientNet's pieces (depthwise conv, batch norm, SiLU,
  // sigmoid gating) are each tested on cuda above.
  Generator g(5);
  auto model = std::make_shared<nn::models::ConvNeXt>(
      nn::models::ModelOptions{.input_size = 12, .generator = &g},
      nn::models::ConvNeXtOptions{
          .dims = {8, 16}, .depths = {1, 1}, .stem_patch = 2, .layer_scale = 0.5});
  model->eval();  // no drop path: the same function on both devices
  const Tensor x0 = rand_cpu({2, 1, 12, 12}, 51);
  auto run = [&](Device dev) {
    model->to(dev);
    model->zero_grad();
    const Tensor y = (*model)(x0.to(dev));
    sum(y * y).backward();
    std::vector<Tensor> out{y.to(Device::cpu())};
    for (const auto& [name, p] : model->named_parameters())
      out.push_back(p.grad().to(Device::cpu()));
    return out;
  };
  const auto want = run(Device::cpu());
  const auto got = run(kCuda);
  REQUIRE(got.size() == want.size());
  // Two stages of depthwise 7x7 (49-term sums), LayerNorm over 8 or 16 channels, a 4x expansion
  // Linear pair and GELU, forward and back: each a few sum_tol's of a few u sqrt(K) relative
  // (K <= 64: 16u) of its result, compounded over ~12 ops: ~200u = 1.2e-5 relative; 1e-4 of
  // (1 + |largest value|) leaves room for the cancellation in LayerNorm's backward.
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("output " << i);
    const double scale = 1 + max_diff(want[i], zeros_like(want[i]));
    CHECK(max_diff(got[i], want[i]) < 1e-4 * scale);
  }
}

// The device-independent checks live in the entry points (ops/batch_norm.cpp, ops/softmax.cpp),
// so a bad call fails with the same message on either device, empty tensors included.
TEST_CASE("cuda ops: batch norm and softmax refuse bad calls with the CPU's message",
          "[ops_cuda_nn]") {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor x = rand_cpu({1, 3, 1, 1}, 1), rm = zeros({3}), rv = ones({3});
  for (const Device dev : {Device::cpu(), kCuda}) {
    const Tensor d = x.to(dev);
    CAPTURE(dev.str());
    CHECK(message([&] { ops::batch_norm(d, rm.to(dev), Tensor(), Tensor(), Tensor(), {}); }) ==
          message([&] { ops::batch_norm(x, rm, Tensor(), Tensor(), Tensor(), {}); }));
    CHECK_THROWS_WITH(ops::batch_norm(d, Tensor(), Tensor(), Tensor(), Tensor(), {}),
                      Catch::Contains("more than 1 value per channel"));
    CHECK_THROWS_WITH(ops::batch_norm(d, rm.to(dev), rv.to(dev), Tensor(), Tensor(),
                                      {.training = false, .eps = -1}),
                      Catch::Contains("expected eps >= 0, got -1"));
    // An empty tensor: the cuda backend returned before looking at dim.
    const Tensor e = empty({0, 4}).to(dev);
    CHECK_THROWS_WITH(ops::softmax(e, 2),
                      Catch::Contains("dim 2 out of range for a tensor with 2"));
    CHECK_THROWS_WITH(ops::softmax_backward(ones({2, 3}).to(dev), ones({3, 2}).to(dev), 1),
                      Catch::Contains("expected grad of shape"));
  }
}
