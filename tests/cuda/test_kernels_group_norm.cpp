// Group / layer norm (cuda/kernels/group_norm.cu) in cuda/emu against ops::group_norm_forward /
// group_norm_backward on the CPU, in f32, f16 and bf16 (the CPU reference runs in f32 on the same
// rounded inputs; its elementwise results are rounded to the kernel's dtype), at aligned and
// misaligned addresses, for group norm layouts (S > 1) and layer norm layouts (S = 1), rows
// shorter and longer than a block. Kernels covered: group_norm_forward_kernel,
// group_norm_backward_input_kernel, group_norm_backward_param_kernel.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/kernels/group_norm.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/group_norm.h"
#include "test_kernels_util.h"

namespace {

using namespace stoke;
using kernels_test::input;
using kernels_test::kFloatDtypes;
using kernels_test::output;
using kernels_test::ptr;
using kernels_test::require_close;
using kernels_test::rounded;
using kernels_test::with_float_type;

// (N, C, S...) with G groups; layer norm cases are G = 1 over (N, D) with S = 1.
struct Case {
  Shape shape;
  int64_t groups;
  bool layer;  // layer_norm over the last dim
};
const std::vector<Case> kCases = {{{2, 6, 5, 7}, 3, false}, {{3, 4, 300}, 2, false},
                                  {{5, 6}, 2, false},       {{4, 7}, 1, true},
                                  {{3, 600}, 1, true},      {{2, 3, 33}, 1, true}};

cuda::GroupNormLayout layout_of(const Case& c) {
  if (c.layer) {
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < c.shape.size(); ++d) rows *= c.shape[d];
    return {.batch = rows, .groups = 1, .channels_per_group = c.shape.back(), .spatial = 1};
  }
  int64_t S = 1;
  for (size_t d = 2; d < c.shape.size(); ++d) S *= c.shape[d];
  return {.batch = c.shape[0],
          .groups = c.groups,
          .channels_per_group = c.shape[1] / c.groups,
          .spatial = S};
}

int64_t params_of(const Case& c) {
  return c.layer ? c.shape.back() : c.shape[1];
}

ops::GroupNormForward reference_forward(const Case& c, const Tensor& x, const Tensor& w,
                                        const Tensor& b) {
  return c.layer ? ops::layer_norm_forward(x, {c.shape.back()}, w, b, {})
                 : ops::group_norm_forward(x, c.groups, w, b, {});
}

// Tolerances, kernel against CPU (u = 2^-24; M <= 600 values per row, 900 per channel for the
// weight gradients). The CPU sums in double (its error negligible), the kernel in f32: the mean
// as a plain sum, within positive_sum_rtol(600) = 2.9e-6 relative for one-signed rows ([40, 44])
// or of sum |x| / M <= 3 otherwise (9e-6 absolute); the variance two-pass, a sum of squares of
// exact differences within 2.9e-6 relative (the mean's error only adds its square), rstd half that
// plus two roundings (4u): kStatTol for the means, kRstdTol for rstd.
constexpr kernels_test::Tolerance kStatTol{1e-5, 1e-5};
constexpr kernels_test::Tolerance kRstdTol{1e-5, 1e-6};

// The weight and bias gradients: sums over N * S <= 900 of dy (x - m) rstd and dy (random signs,
// |dy| <= 1, E xhat^2 = 1): 6u sqrt(K / 3 * K / 3) = 2u K = 1.1e-4.
constexpr kernels_test::Tolerance kGradSumTol{1e-5, 1.2e-4};

// Elementwise results (output, input gradient): f32 math on both sides, then one rounding to the
// dtype. f32: the mean's error (2.9e-6 of |m| <= 44: 1.3e-4) through rstd |w| <= 1.3, rstd's
// relative error times |y|, a few roundings: rtol 1e-5, atol 2e-4.
// f16/bf16: that f32 bound, and the dtype's rounding of the result on top (kernels_test::tol).
kernels_test::Tolerance elem_tol(DType d) {
  constexpr kernels_test::Tolerance f32{1e-5, 2e-4};
  if (d == DType::f32) return f32;
  const kernels_test::Tolerance low = kernels_test::tol(d);
  return {low.rtol + f32.rtol, low.atol + f32.atol};
}

}  // namespace

TEST_CASE("cuda kernels: group_norm_forward_kernel matches ops::group_norm / layer_norm",
          "[cuda][kernels][group_norm]") {
  uint64_t seed = 1;
  for (const Case& c : kCases)
    for (DType d : kFloatDtypes)
      for (bool mis : {false, true})
        for (bool affine : {true, false}) {
          if (!affine && d != DType::f32) continue;
          INFO(detail::str_cat(c.layer ? "layer_norm " : "group_norm ", c.shape, " G=", c.groups,
                               " ", dtype_name(d), mis ? " misaligned" : "",
                               affine ? " affine" : ""));
          // A mean far from zero against the spread checks the two-pass variance.
          const double lo = mis ? 40 : -3, hi = mis ? 44 : 2;
          const int64_t P = params_of(c);
          const Tensor x = input(c.shape, d, mis, lo, hi, seed++);
          const Tensor w = affine ? input({P}, DType::f32, false, 0.5, 1.5, seed++) : Tensor();
          const Tensor b = affine ? input({P}, DType::f32, false, -1, 1, seed++) : Tensor();
          const auto ref = reference_forward(c, x.to(DType::f32), w, b);
          const cuda::GroupNormLayout l = layout_of(c);
          const int64_t rows = l.batch * l.groups;
          const Tensor y = output(c.shape, d, mis);
          const Tensor mean = output({rows}, DType::f32, false),
                       rstd = output({rows}, DType::f32, false);
          with_float_type(d, [&](auto tag) {
            using T = decltype(tag);
            cuda::group_norm_forward(l, ptr<T>(x), ptr<T>(y), affine ? w.data<float>() : nullptr,
                                     affine ? b.data<float>() : nullptr, 1e-5f, mean.data<float>(),
                                     rstd.data<float>(), nullptr);
          });
          require_close(mean, ref.save_mean, kStatTol, "save_mean");
          require_close(rstd, ref.save_rstd, kRstdTol, "save_rstd");
          require_close(y, rounded(ref.output, d), elem_tol(d), "output");
        }
}

TEST_CASE(
    "cuda kernels: group_norm_backward_input_kernel and group_norm_backward_param_kernel match "
    "ops::group_norm_backward",
    "[cuda][kernels][group_norm]") {
  uint64_t seed = 900;
  for (const Case& c : kCases)
    for (DType d : kFloatDtypes)
      for (bool mis : {false, true}) {
        INFO(detail::str_cat(c.layer ? "layer_norm " : "group_norm ", c.shape, " G=", c.groups, " ",
                             dtype_name(d), mis ? " misaligned" : ""));
        const int64_t P = params_of(c);
        const Tensor x = input(c.shape, d, mis, -2, 3, seed++);
        const Tensor gy = input(c.shape, d, mis, -1, 1, seed++);
        const Tensor w = input({P}, DType::f32, false, 0.5, 1.5, seed++);
        const Tensor xf = x.to(DType::f32), gyf = gy.to(DType::f32);
        const auto fwd = reference_forward(c, xf, w, Tensor());
        const auto ref =
            c.layer ? ops::layer_norm_backward(gyf, xf, {P}, w, fwd.save_mean, fwd.save_rstd)
                    : ops::group_norm_backward(gyf, xf, c.groups, w, fwd.save_mean, fwd.save_rstd);
        const Tensor gx = output(c.shape, d, mis);
        const Tensor gw = output({P}, DType::f32, false), gb = output({P}, DType::f32, false);
        with_float_type(d, [&](auto tag) {
          using T = decltype(tag);
          cuda::group_norm_backward(layout_of(c), ptr<T>(gy), ptr<T>(x), w.data<float>(),
                                    fwd.save_mean.data<float>(), fwd.save_rstd.data<float>(),
                                    ptr<T>(gx), gw.data<float>(), gb.data<float>(), nullptr);
        });
        require_close(gw, ref.grad_weight, kGradSumTol, "grad_weight");
        require_close(gb, ref.grad_bias, kGradSumTol, "grad_bias");
        require_close(gx, rounded(ref.grad_input, d), elem_tol(d), "grad_input");
      }
}

TEST_CASE("cuda kernels: group norm partial outputs and argument errors",
          "[cuda][kernels][group_norm]") {
  const Case c{{3, 4, 5}, 2, false};
  const Tensor x = input(c.shape, DType::f32, false, -1, 1, 7);
  const Tensor gy = input(c.shape, DType::f32, false, -1, 1, 8);
  const auto fwd = ops::group_norm_forward(x, 2, Tensor(), Tensor(), {});
  const auto ref = ops::group_norm_backward(gy, x, 2, Tensor(), fwd.save_mean, fwd.save_rstd);
  // grad_x alone, no weight; then grad_bias alone.
  const Tensor gx = output(c.shape, DType::f32, false);
  cuda::group_norm_backward(layout_of(c), gy.data<float>(), x.data<float>(), nullptr,
                            fwd.save_mean.data<float>(), fwd.save_rstd.data<float>(),
                            gx.data<float>(), nullptr, nullptr, nullptr);
  require_close(gx, ref.grad_input, elem_tol(DType::f32), "grad_input alone");
  const Tensor gb = output({4}, DType::f32, false);
  const Tensor wones = full({4}, 1.0);
  const auto ref_b = ops::group_norm_backward(gy, x, 2, wones, fwd.save_mean, fwd.save_rstd);
  cuda::group_norm_backward(layout_of(c), gy.data<float>(), x.data<float>(), nullptr,
                            fwd.save_mean.data<float>(), fwd.save_rstd.data<float>(), nullptr,
                            nullptr, gb.data<float>(), nullptr);
  require_close(gb, ref_b.grad_bias, kGradSumTol, "grad_bias alone");
  std::vector<float> buf(16, 0.f);
  CHECK_THROWS_WITH(
      cuda::group_norm_forward({.batch = 2, .groups = 0}, buf.data(), buf.data(), nullptr, nullptr,
                               1e-5f, buf.data(), buf.data(), nullptr),
      Catch::Contains("cuda::group_norm") && Catch::Contains("(2, 0, 1, 1)"));
  CHECK_THROWS_WITH(cuda::group_norm_forward({.batch = 2}, buf.data(), buf.data(), nullptr, nullptr,
                                             1e-5f, nullptr, buf.data(), nullptr),
                    Catch::Contains("expected non-null x, y, save_mean and save_rstd"));
}
