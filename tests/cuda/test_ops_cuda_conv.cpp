// conv2d on "cuda" tensors (emulated: stoke's implicit-GEMM forward, im2col/col2im + SGEMM
// backward) against the CPU op: geometries with stride, padding, dilation, groups, depthwise,
// rectangular kernels and no bias; f32 and f16; autograd through stoke::conv2d; the CPU's errors.
#include <catch2/catch.hpp>

#include "ops/cuda/backend.h"
#include "ops_cuda_util.h"

using namespace stoke;
using namespace stoke::test;

namespace {

struct ConvCase {
  Shape x, w;
  Conv2dOptions o;
  bool bias;
};

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> c = {
      {{2, 3, 6, 6}, {4, 3, 1, 1}, {}, true},                                          // 1x1
      {{3, 4, 9, 7}, {5, 4, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, true},       // strided
      {{1, 2, 11, 12}, {3, 2, 5, 5}, {.padding = {2, 1}, .dilation = {2, 2}}, false},  // dilated
      {{2, 4, 8, 8}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}, true},            // groups
      {{2, 6, 7, 7}, {6, 1, 3, 3}, {.padding = {1, 1}, .groups = 6}, true},            // depthwise
      {{4, 3, 10, 5}, {2, 3, 3, 2}, {.stride = {1, 2}}, false},  // rectangular
  };
  return c;
}

// Tolerances of conv2d and its three gradients, device against CPU: every element is a sum of K
// products of randn values (the CPU's direct and im2col paths here: fewer than 16 channels, no
// Winograd), K = C_in / groups * kh * kw for the output, at most C_out / groups * kh * kw for
// the input gradient, N * OH * OW for the weight and bias gradients; signed_sum_tol of the sums
// of squared products, from the same ops on the squared operands in f64; the bias and the
// output's rounding to a half dtype (low_u: 2 u_dtype |result|, the bias added after the GEMM
// rounding once more) on top.
struct ConvTol {
  double y, grad_input, grad_weight, grad_bias;
};
ConvTol conv_tol(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy,
                 const Conv2dOptions& o, double low_u, const Tensor& y,
                 const ops::Conv2dGrads& want) {
  const auto sq = [](const Tensor& t) { return ops::mul(t, t).to(DType::f64); };
  const auto mag = [](const Tensor& t) { return t.defined() ? max_abs(t) : 0.0; };
  const int64_t groups = o.groups, kh = w.size(2), kw = w.size(3);
  const int64_t k_out = w.size(1) * kh * kw, k_in = w.size(0) / groups * kh * kw;
  const int64_t k_w = gy.size(0) * gy.size(2) * gy.size(3);
  const Tensor y2 = ops::conv2d(sq(x), sq(w), Tensor(), o);
  const auto g2 = ops::conv2d_backward(sq(gy), sq(x), sq(w), o, true, true, false);
  const double bias = b.defined() ? 2 * kU * mag(y) : 0.0;
  return {
      signed_sum_tol(k_out, max_abs(y2)) + bias + 2 * low_u * mag(y),
      signed_sum_tol(k_in, max_abs(g2.grad_input)) + 2 * low_u * mag(want.grad_input),
      signed_sum_tol(k_w, max_abs(g2.grad_weight)) + 2 * low_u * mag(want.grad_weight),
      signed_sum_tol(k_w, max_abs(ops::sum(sq(gy), {0, 2, 3}))) + 2 * low_u * mag(want.grad_bias)};
}

}  // namespace

TEST_CASE("cuda ops: conv2d forward and all three gradients match the CPU", "[ops_cuda_conv]") {
  CHECK(ops::cuda_glue::conv_impl() == ops::cuda_glue::ConvImpl::stoke);  // emu: stoke's kernels
  for (DType dtype : {DType::f32, DType::f16}) {
    const double low_u = dtype == DType::f16 ? 0x1p-11 : 0.0;
    for (size_t i = 0; i < cases().size(); ++i) {
      const ConvCase& c = cases()[i];
      INFO("case " << i << " " << dtype);
      // Inputs representable in the dtype, so both sides see the same values.
      const Tensor x = rand_cpu(c.x, 10 + i).to(dtype).to(DType::f32);
      const Tensor w = rand_cpu(c.w, 20 + i).to(dtype).to(DType::f32);
      const Tensor b = c.bias ? rand_cpu({c.w[0]}, 30 + i).to(dtype).to(DType::f32) : Tensor();
      const auto on_cuda = [&](const Tensor& t) { return t.defined() ? t.to(kCuda).to(dtype) : t; };
      const Tensor y = ops::conv2d(x, w, b, c.o);
      const Tensor yd = ops::conv2d(on_cuda(x), on_cuda(w), on_cuda(b), c.o);
      CHECK(yd.dtype() == dtype);
      CHECK(yd.device() == kCuda);
      const Tensor gy = rand_cpu(y.shape(), 40 + i).to(dtype).to(DType::f32);
      const auto want = ops::conv2d_backward(gy, x, w, c.o, true, true, true);
      const ConvTol tol = conv_tol(x, w, b, gy, c.o, low_u, y, want);
      CHECK(max_diff(yd, y) < tol.y);
      const auto got =
          ops::conv2d_backward(on_cuda(gy), on_cuda(x), on_cuda(w), c.o, true, true, true);
      CHECK(max_diff(got.grad_input, want.grad_input) < tol.grad_input);
      CHECK(max_diff(got.grad_weight, want.grad_weight) < tol.grad_weight);
      CHECK(max_diff(got.grad_bias, want.grad_bias) < tol.grad_bias);
      // One gradient at a time leaves the others undefined.
      const auto only_w =
          ops::conv2d_backward(on_cuda(gy), on_cuda(x), on_cuda(w), c.o, false, true, false);
      CHECK_FALSE(only_w.grad_input.defined());
      CHECK(max_diff(only_w.grad_weight, want.grad_weight) < tol.grad_weight);
    }
  }
}

TEST_CASE("cuda ops: conv2d backward in several chunks, the last one shorter, matches the CPU",
          "[ops_cuda_conv]") {
  // A column budget of 3 samples' columns: batches of 7 run as chunks of 3, 3 and 1 (the last
  // chunk's column matrix is packed with row stride 1 * P, not the buffer's 3 * P).
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {{7, 3, 6, 5}, {4, 3, 3, 3}, {.padding = {1, 1}}},
      {{7, 4, 7, 7}, {6, 2, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}},
  };
  for (const Case& c : cases) {
    const Tensor x = rand_cpu(c.x, 1), w = rand_cpu(c.w, 2);
    const Tensor gy = rand_cpu(ops::conv2d(x, w, Tensor(), c.o).shape(), 3);
    const int64_t groups = c.o.groups, P = gy.size(2) * gy.size(3);
    const int64_t per_sample = c.x[1] / groups * c.w[2] * c.w[3] * P;
    const int64_t old = ops::cuda_glue::set_conv_column_budget(3 * per_sample);
    const auto got =
        ops::conv2d_backward(gy.to(kCuda), x.to(kCuda), w.to(kCuda), c.o, true, true, false);
    ops::cuda_glue::set_conv_column_budget(old);
    const auto want = ops::conv2d_backward(gy, x, w, c.o, true, true, false);
    const ConvTol tol = conv_tol(x, w, Tensor(), gy, c.o, 0.0, Tensor(), want);
    CHECK(max_diff(got.grad_input, want.grad_input) < tol.grad_input);
    CHECK(max_diff(got.grad_weight, want.grad_weight) < tol.grad_weight);
  }
  CHECK_THROWS_WITH(ops::cuda_glue::set_conv_column_budget(0),
                    Catch::Contains("expected a positive number of floats, got 0"));
}

TEST_CASE("cuda ops: conv2d's weight gradient through split-K matches the CPU", "[ops_cuda_conv]") {
  // 6 samples of 16x16 outputs: k = 1536 for dW's SGEMM over a one-tile C, cut into 3 slices
  // (cuda::sgemm_split_k_slices); then chunks of 4 and 2 samples (2 slices, then one) accumulate
  // into dW with beta = 1.
  const Conv2dOptions o{.padding = {1, 1}};
  const Tensor x = rand_cpu({6, 3, 16, 16}, 1), w = rand_cpu({4, 3, 3, 3}, 2);
  const Tensor gy = rand_cpu({6, 4, 16, 16}, 3);
  const auto want = ops::conv2d_backward(gy, x, w, o, true, true, false);
  const ConvTol tol = conv_tol(x, w, Tensor(), gy, o, 0.0, Tensor(), want);
  for (int64_t budget_samples : {6, 4}) {
    INFO("column budget of " << budget_samples << " samples");
    const int64_t old = ops::cuda_glue::set_conv_column_budget(budget_samples * 3 * 9 * 256);
    const auto got =
        ops::conv2d_backward(gy.to(kCuda), x.to(kCuda), w.to(kCuda), o, true, true, false);
    ops::cuda_glue::set_conv_column_budget(old);
    CHECK(max_diff(got.grad_input, want.grad_input) < tol.grad_input);
    CHECK(max_diff(got.grad_weight, want.grad_weight) < tol.grad_weight);
  }
}

TEST_CASE("cuda ops: autograd through conv2d on cuda gives the CPU's gradients",
          "[ops_cuda_conv]") {
  const Tensor x0 = rand_cpu({2, 3, 8, 8}, 1), w0 = rand_cpu({4, 3, 3, 3}, 2);
  const Tensor b0 = rand_cpu({4}, 3);
  auto run = [&](Device dev) {
    Tensor x = x0.to(dev).detach(), w = w0.to(dev).detach(), b = b0.to(dev).detach();
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    Tensor y = conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}});
    stoke::sum(stoke::mul(y, y)).backward();
    return std::vector<Tensor>{x.grad(), w.grad(), b.grad()};
  };
  const auto want = run(Device::cpu());
  const auto got = run(kCuda);
  // The gradients of sum(y^2) are sums of at most 64 products (x and w's gradients: 4 x 9, and
  // 2 x 4 x 4 positions) of 2y (|2y| <= 30) with randn values: signed_sum_tol(64, 64 x 30^2) =
  // 4e-4, and y's own difference (signed_sum_tol(27, 27 x 16) = 2.2e-5) carried through them.
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("grad " << i);
    CHECK(got[i].device() == kCuda);
    CHECK(max_diff(got[i], want[i]) < 1e-3);
  }
}

TEST_CASE("cuda ops: conv_transpose2d forward and its gradients match the CPU", "[ops_cuda_conv]") {
  struct Case {
    Shape x, w;
    ConvTranspose2dOptions o;
  };
  for (const Case& c :
       {Case{{2, 4, 5, 5},
             {4, 3, 3, 3},
             {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}},
        Case{{1, 4, 4, 3}, {4, 2, 2, 3}, {.stride = {2, 1}, .groups = 2, .dilation = {1, 2}}}}) {
    INFO("x " << c.x << " w " << c.w);
    const Tensor x0 = rand_cpu(c.x, 61), w0 = rand_cpu(c.w, 62);
    const Tensor b0 = rand_cpu({c.w[1] * c.o.groups}, 63);
    auto run = [&](Device dev) {
      Tensor x = x0.to(dev).detach(), w = w0.to(dev).detach(), b = b0.to(dev).detach();
      for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
      Tensor y = conv_transpose2d(x, w, b, c.o);
      stoke::sum(stoke::mul(y, y)).backward();
      return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
    };
    const auto want = run(Device::cpu());
    const auto got = run(kCuda);
    // As for conv2d's autograd above: sums of at most 4 x 9 products for y, of at most 50
    // products of 2y (|2y| <= 30) with randn values for the gradients: signed_sum_tol(50,
    // 50 x 30^2) = 3.1e-4.
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("output " << i);
      CHECK(got[i].device() == kCuda);
      CHECK(max_diff(got[i], want[i]) < 1e-3);
    }
  }
}

TEST_CASE("cuda ops: conv2d refuses bad input with the CPU's messages", "[ops_cuda_conv]") {
  const Tensor x = rand_cpu({1, 4, 5, 5}, 1), w = rand_cpu({2, 3, 3, 3}, 2);
  for (Device dev : {Device::cpu(), kCuda}) {
    INFO(dev);
    CHECK_THROWS_WITH(ops::conv2d(x.to(dev), w.to(dev), Tensor(), {}),
                      Catch::Contains("stoke::conv2d") &&
                          Catch::Contains("expected weight of shape [2, 4, kh, kw]"));
    CHECK_THROWS_WITH(
        ops::conv2d(x.to(dev), rand_cpu({2, 4, 3, 3}, 3).to(dev).to(DType::f16), Tensor(), {}),
        Catch::Contains("same dtype"));
    CHECK_THROWS_WITH(ops::conv2d(x.to(dev), rand_cpu({2, 4, 7, 7}, 3).to(dev), Tensor(), {}),
                      Catch::Contains("output size would be"));
  }
  CHECK_THROWS_WITH(ops::conv2d(x.to(kCuda), rand_cpu({2, 4, 3, 3}, 4), Tensor(), {}),
                    Catch::Contains("same device"));
  CHECK_THROWS_WITH(ops::cuda_glue::set_conv_impl(ops::cuda_glue::ConvImpl::cudnn),
                    Catch::Contains("no cuDNN"));
}
