// Batch norm (cuda/kernels/batch_norm.cu) in cuda/emu against ops::batch_norm_forward /
// batch_norm_backward, in f32, f16 and bf16 (the CPU reference runs in f32 on the same rounded
// inputs, and its result is rounded to the kernel's dtype), at aligned and misaligned (one
// element off) addresses. Kernels covered: batch_norm_stats_kernel, batch_norm_apply_kernel,
// batch_norm_backward_reduce_kernel, batch_norm_backward_input_kernel, and their channels-last
// (*_nhwc_kernel) twins.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/kernels/batch_norm.h"
#include "ops/batch_norm.h"
#include "ops/creation.h"
#include "test_kernels_util.h"

namespace {

using namespace stoke;
using kernels_test::input;
using kernels_test::output;
using kernels_test::require_close;
using kernels_test::require_equal;
using kernels_test::rounded;

using kernels_test::kFloatDtypes;
using kernels_test::ptr;
using kernels_test::with_float_type;

cuda::BatchNormLayout layout_of(const Shape& s) {
  int64_t spatial = 1;
  for (size_t d = 2; d < s.size(); ++d) spatial *= s[d];
  return {.batch = s[0], .channels = s[1], .spatial = spatial};
}

const std::vector<Shape> kBnShapes = {
    {5, 3}, {2, 3, 5, 7}, {4, 2, 3}, {3, 4, 17, 1}, {2, 1, 20, 20}};

// Tolerances, kernel against CPU (u = 2^-24; K = N * spatial <= 800 values per channel, each
// uniform over a width of at most 5). The kernel sums in f32 around a shift s (the channel's
// first value; the CPU does the same in double, its error negligible): |x - s| <= 5, so the mean
// s + sum(x - s) / K within positive_sum_rtol(800) = 3.4e-6 of 5 (one sign at worst) plus u |m|:
// atol 2e-5. The variance E[(x - s)^2] - E[x - s]^2 cancels by up to (var + 25) / var <= 13
// (var >= 25 / 12 for a uniform width of 5): 13 x 3.4e-6 = 4.4e-5 relative, invstd half that plus
// two roundings, the running blends a few u more: rtol 5e-5.
constexpr kernels_test::Tolerance kStatTol{5e-5, 2e-5};

// The weight and bias gradients: sums over K <= 800 of gy xhat and gy (|gy| <= 1 uniform,
// E xhat^2 = 1: random signs), the kernel's within 6u sqrt(K / 3 * K / 3) = 2u K = 9.5e-5.
constexpr kernels_test::Tolerance kGradSumTol{1e-5, 1e-4};

// Elementwise results (output, input gradient): f32 math on both sides, then one rounding to
// the dtype. f32: the statistics' errors through (x - m) invstd w: the mean's 2e-5 times invstd
// |w| <= 1.3, invstd's 2.5e-5 relative of |y|, a few roundings more: rtol 5e-5, atol 3e-5.
// f16/bf16: that f32 bound, and the dtype's rounding of the result on top (kernels_test::tol).
kernels_test::Tolerance elem_tol(DType d) {
  constexpr kernels_test::Tolerance f32{5e-5, 3e-5};
  if (d == DType::f32) return f32;
  const kernels_test::Tolerance low = kernels_test::tol(d);
  return {low.rtol + f32.rtol, low.atol + f32.atol};
}

}  // namespace

TEST_CASE(
    "cuda kernels: batch_norm_stats_kernel and batch_norm_apply_kernel (training) match "
    "ops::batch_norm_forward",
    "[cuda][kernels][batch_norm]") {
  uint64_t seed = 1;
  for (const Shape& shape : kBnShapes)
    for (DType d : kFloatDtypes)
      for (bool mis : {false, true})
        for (bool affine : {true, false}) {
          if (!affine && d != DType::f32) continue;  // the null weight/bias path once per shape
          const int64_t C = shape[1];
          // A mean far from zero against the spread checks the shifted variance sums.
          const double lo = mis ? 40 : -3, hi = mis ? 44 : 2;
          INFO(detail::str_cat("input ", shape, " ", dtype_name(d), mis ? " misaligned" : "",
                               affine ? " affine" : " no weight/bias"));
          const Tensor x = input(shape, d, mis, lo, hi, seed++);
          const Tensor w = affine ? input({C}, DType::f32, false, 0.5, 1.5, seed++) : Tensor();
          const Tensor b = affine ? input({C}, DType::f32, false, -1, 1, seed++) : Tensor();
          const Tensor rm = input({C}, DType::f32, false, -1, 1, seed++);
          const Tensor rv = input({C}, DType::f32, false, 0.5, 2, seed++);
          const Tensor rm_ref = rm.clone(), rv_ref = rv.clone();
          const auto ref = ops::batch_norm_forward(x.to(DType::f32), rm_ref, rv_ref, w, b,
                                                   {.training = true, .momentum = 0.2});
          const Tensor y = output(shape, d, mis);
          const Tensor mean = output({C}, DType::f32, false),
                       invstd = output({C}, DType::f32, false);
          with_float_type(d, [&](auto tag) {
            using T = decltype(tag);
            cuda::batch_norm_forward_training(
                layout_of(shape), ptr<T>(x), ptr<T>(y), affine ? w.data<float>() : nullptr,
                affine ? b.data<float>() : nullptr, rm.data<float>(), rv.data<float>(), 0.2f, 1e-5f,
                mean.data<float>(), invstd.data<float>(), nullptr);
          });
          require_close(mean, ref.save_mean, kStatTol, "save_mean");
          require_close(invstd, ref.save_invstd, kStatTol, "save_invstd");
          require_close(rm, rm_ref, kStatTol, "running_mean");
          require_close(rv, rv_ref, kStatTol, "running_var");
          require_close(y, rounded(ref.output, d), elem_tol(d), "output");
        }
}

TEST_CASE("cuda kernels: batch norm training without running statistics and in evaluation",
          "[cuda][kernels][batch_norm]") {
  uint64_t seed = 500;
  for (const Shape& shape : kBnShapes)
    for (DType d : kFloatDtypes) {
      INFO(detail::str_cat("input ", shape, " ", dtype_name(d)));
      const int64_t C = shape[1];
      const Tensor x = input(shape, d, true, -2, 3, seed++);
      const Tensor w = input({C}, DType::f32, false, 0.5, 1.5, seed++);
      const Tensor b = input({C}, DType::f32, false, -1, 1, seed++);
      const Tensor rm = input({C}, DType::f32, false, -1, 1, seed++);
      const Tensor rv = input({C}, DType::f32, false, 0.5, 2, seed++);
      const Tensor mean = output({C}, DType::f32, false), invstd = output({C}, DType::f32, false);
      const Tensor y = output(shape, d, true);
      // Training with batch statistics only (track_running_stats=False).
      const auto ref = ops::batch_norm_forward(x.to(DType::f32), Tensor(), Tensor(), w, b, {});
      with_float_type(d, [&](auto tag) {
        using T = decltype(tag);
        cuda::batch_norm_forward_training(layout_of(shape), ptr<T>(x), ptr<T>(y), w.data<float>(),
                                          b.data<float>(), nullptr, nullptr, 0.1f, 1e-5f,
                                          mean.data<float>(), invstd.data<float>(), nullptr);
      });
      require_close(y, rounded(ref.output, d), elem_tol(d), "training output");
      require_close(invstd, ref.save_invstd, kStatTol, "training save_invstd");
      // Evaluation from the running statistics (batch_norm_apply_kernel's eval instance).
      const auto ev = ops::batch_norm_forward(x.to(DType::f32), rm.clone(), rv.clone(), w, b,
                                              {.training = false, .eps = 1e-3});
      const Tensor y2 = output(shape, d, true);
      const Tensor m2 = output({C}, DType::f32, false), is2 = output({C}, DType::f32, false);
      with_float_type(d, [&](auto tag) {
        using T = decltype(tag);
        cuda::batch_norm_forward_eval(layout_of(shape), ptr<T>(x), ptr<T>(y2), w.data<float>(),
                                      b.data<float>(), rm.data<float>(), rv.data<float>(), 1e-3f,
                                      m2.data<float>(), is2.data<float>(), nullptr);
      });
      require_close(y2, rounded(ev.output, d), elem_tol(d), "eval output");
      require_close(m2, ev.save_mean, kStatTol, "eval save_mean");
      require_close(is2, ev.save_invstd, kStatTol, "eval save_invstd");
    }
}

TEST_CASE(
    "cuda kernels: batch_norm_backward_reduce_kernel and batch_norm_backward_input_kernel "
    "match ops::batch_norm_backward",
    "[cuda][kernels][batch_norm]") {
  uint64_t seed = 900;
  for (const Shape& shape : kBnShapes)
    for (DType d : kFloatDtypes)
      for (bool training : {true, false})
        for (bool mis : {false, true}) {
          INFO(detail::str_cat("input ", shape, " ", dtype_name(d),
                               training ? " training" : " eval", mis ? " misaligned" : ""));
          const int64_t C = shape[1];
          const Tensor x = input(shape, d, mis, -2, 3, seed++);
          const Tensor gy = input(shape, d, mis, -1, 1, seed++);
          const Tensor w = input({C}, DType::f32, false, 0.5, 1.5, seed++);
          const auto fwd =
              ops::batch_norm_forward(x.to(DType::f32), Tensor(), Tensor(), w, Tensor(), {});
          const auto ref = ops::batch_norm_backward(gy.to(DType::f32), x.to(DType::f32), w,
                                                    fwd.save_mean, fwd.save_invstd, training);
          const Tensor gx = output(shape, d, mis);
          const Tensor gw = output({C}, DType::f32, false), gb = output({C}, DType::f32, false);
          std::vector<float> ws(static_cast<size_t>(cuda::batch_norm_backward_workspace_floats(C)));
          with_float_type(d, [&](auto tag) {
            using T = decltype(tag);
            cuda::batch_norm_backward(layout_of(shape), ptr<T>(gy), ptr<T>(x), w.data<float>(),
                                      fwd.save_mean.data<float>(), fwd.save_invstd.data<float>(),
                                      training, ptr<T>(gx), gw.data<float>(), gb.data<float>(),
                                      ws.data(), nullptr);
          });
          require_close(gw, ref.grad_weight, kGradSumTol, "grad_weight");
          require_close(gb, ref.grad_bias, kGradSumTol, "grad_bias");
          require_close(gx, rounded(ref.grad_input, d), elem_tol(d), "grad_input");
        }
}

TEST_CASE("cuda kernels: batch norm backward with partial outputs and argument errors",
          "[cuda][kernels][batch_norm]") {
  const Shape shape{3, 2, 4, 5};
  const Tensor x = input(shape, DType::f32, false, -1, 1, 7);
  const Tensor gy = input(shape, DType::f32, false, -1, 1, 8);
  const auto fwd = ops::batch_norm_forward(x, Tensor(), Tensor(), Tensor(), Tensor(), {});
  const auto ref = ops::batch_norm_backward(gy, x, Tensor(), fwd.save_mean, fwd.save_invstd, false,
                                            {true, false, false});
  // Eval grad_x alone needs no sums: no workspace, no x.
  const Tensor gx = output(shape, DType::f32, false);
  cuda::batch_norm_backward(layout_of(shape), gy.data<float>(), nullptr, nullptr,
                            fwd.save_mean.data<float>(), fwd.save_invstd.data<float>(), false,
                            gx.data<float>(), nullptr, nullptr, nullptr, nullptr);
  require_close(gx, ref.grad_input, elem_tol(DType::f32), "eval grad_input");
  // The training grad_x needs the workspace.
  CHECK_THROWS_WITH(
      cuda::batch_norm_backward(layout_of(shape), gy.data<float>(), x.data<float>(), nullptr,
                                fwd.save_mean.data<float>(), fwd.save_invstd.data<float>(), true,
                                gx.data<float>(), nullptr, nullptr, nullptr, nullptr),
      Catch::Contains("cuda::batch_norm_backward") &&
          Catch::Contains("batch_norm_backward_workspace_floats(2)"));
  // Batch statistics of a single value per channel are undefined.
  std::vector<float> buf(16, 0.f);
  CHECK_THROWS_WITH(
      cuda::batch_norm_forward_training({.batch = 1, .channels = 2, .spatial = 1}, buf.data(),
                                        buf.data(), nullptr, nullptr, nullptr, nullptr, 0.1f, 1e-5f,
                                        buf.data(), buf.data(), nullptr),
      Catch::Contains("more than 1 value per channel") && Catch::Contains("(1, 2, 1)"));
  CHECK_THROWS_WITH(cuda::batch_norm_forward_eval({.batch = 2, .channels = 2, .spatial = 3},
                                                  buf.data(), buf.data(), nullptr, nullptr, nullptr,
                                                  nullptr, 1e-5f, nullptr, nullptr, nullptr),
                    Catch::Contains("expected running_mean and running_var in evaluation"));
}

TEST_CASE(
    "cuda kernels: batch_norm_apply_kernel and the backward kernels with the fused ReLU match "
    "ops::batch_norm_forward and batch_norm_backward with relu",
    "[cuda][kernels][batch_norm]") {
  uint64_t seed = 1300;
  for (const Shape& shape : kBnShapes)
    for (DType d : kFloatDtypes)
      for (bool training : {true, false}) {
        INFO(
            detail::str_cat("input ", shape, " ", dtype_name(d), training ? " training" : " eval"));
        const int64_t C = shape[1];
        const Tensor x = input(shape, d, true, -2, 3, seed++);
        const Tensor gz = input(shape, d, false, -1, 1, seed++);
        const Tensor w = input({C}, DType::f32, false, 0.5, 1.5, seed++);
        const Tensor b = input({C}, DType::f32, false, -1, 1, seed++);
        const Tensor rm = input({C}, DType::f32, false, -1, 1, seed++);
        const Tensor rv = input({C}, DType::f32, false, 0.5, 2, seed++);
        const BatchNormOptions o{.training = training, .relu = true};
        const auto ref = ops::batch_norm_forward(x.to(DType::f32), training ? Tensor() : rm,
                                                 training ? Tensor() : rv, w, b, o);
        const Tensor z = output(shape, d, true);
        const Tensor mean = output({C}, DType::f32, false), invstd = output({C}, DType::f32, false);
        with_float_type(d, [&](auto tag) {
          using T = decltype(tag);
          if (training)
            cuda::batch_norm_forward_training(
                layout_of(shape), ptr<T>(x), ptr<T>(z), w.data<float>(), b.data<float>(), nullptr,
                nullptr, 0.1f, 1e-5f, mean.data<float>(), invstd.data<float>(), nullptr, true);
          else
            cuda::batch_norm_forward_eval(layout_of(shape), ptr<T>(x), ptr<T>(z), w.data<float>(),
                                          b.data<float>(), rm.data<float>(), rv.data<float>(),
                                          1e-5f, mean.data<float>(), invstd.data<float>(), nullptr,
                                          true);
        });
        require_close(z, rounded(ref.output, d), elem_tol(d), "relu output");
        // The backward masks by the device's own output (its zeros are where the mask is).
        const Tensor z32 = z.to(DType::f32);
        const auto gref =
            ops::batch_norm_backward(gz.to(DType::f32), x.to(DType::f32), w, ref.save_mean,
                                     ref.save_invstd, training, {true, true, true}, z32);
        const Tensor gx = output(shape, d, false);
        const Tensor gw = output({C}, DType::f32, false), gb = output({C}, DType::f32, false);
        std::vector<float> ws(static_cast<size_t>(cuda::batch_norm_backward_workspace_floats(C)));
        with_float_type(d, [&](auto tag) {
          using T = decltype(tag);
          cuda::batch_norm_backward(layout_of(shape), ptr<T>(gz), ptr<T>(x), w.data<float>(),
                                    ref.save_mean.data<float>(), ref.save_invstd.data<float>(),
                                    training, ptr<T>(gx), gw.data<float>(), gb.data<float>(),
                                    ws.data(), nullptr, ptr<T>(z));
        });
        require_close(gw, gref.grad_weight, kGradSumTol, "relu grad_weight");
        require_close(gb, gref.grad_bias, kGradSumTol, "relu grad_bias");
        require_close(gx, rounded(gref.grad_input, d), elem_tol(d), "relu grad_input");
      }
}

// The channels-last layout (batch_norm_stats_nhwc_kernel, batch_norm_apply_nhwc_kernel,
// batch_norm_backward_reduce_nhwc_kernel, batch_norm_backward_input_nhwc_kernel) on the NHWC copy
// of the input: every result equals the NCHW kernels' bit for bit, by construction (the same
// positions summed in the same order per thread, the same block combine, the same per-value steps;
// batch_norm.cu), and is within the tolerances above of the CPU. The channel counts take each
// channels-per-block instance (1, 2, 4, 8; nhwc_channels_per_block) with a partial last block, and
// more than 256 positions per channel (each thread sums several). Every dtype, mode and ReLU
// combination on the first shape; one on each wide one (their NCHW runs launch C blocks of 256
// threads, each one thread of the emulator: minutes under ThreadSanitizer for the full sweep).
TEST_CASE("cuda kernels: batch norm on channels-last memory equals the NCHW kernels and the CPU",
          "[cuda][kernels][batch_norm]") {
  const std::vector<Shape> shapes = {
      {3, 5, 12, 10}, {2, 131, 3, 3}, {2, 259, 2, 3}, {1, 517, 2, 3}};
  uint64_t seed = 2000;
  for (const Shape& shape : shapes)
    for (DType d : kFloatDtypes)
      for (bool training : {true, false})
        for (bool relu : {false, true}) {
          // The wide shapes: one combination each (f16 training with ReLU; f32 in eval for 259).
          const bool wide = shape[1] > 64;
          const bool eval_f32 = d == DType::f32 && !training && !relu;
          const bool train_f16 = d == DType::f16 && training && relu;
          if (wide && !(shape[1] == 259 ? eval_f32 : train_f16)) continue;
          const bool mis = relu;  // misaligned once per pair
          INFO(detail::str_cat("input ", shape, " ", dtype_name(d),
                               training ? " training" : " eval", relu ? " relu misaligned" : ""));
          const int64_t C = shape[1];
          const Shape nhwc{shape[0], shape[2], shape[3], C};
          const auto to_nhwc = [&](const Tensor& t) {
            Tensor o = output(nhwc, t.dtype(), mis);
            o.copy_(t.permute({0, 2, 3, 1}));
            return o;
          };
          const auto to_nchw = [](const Tensor& t) { return t.permute({0, 3, 1, 2}).contiguous(); };
          const Tensor x = input(shape, d, false, -2, 3, seed++);
          const Tensor gy = input(shape, d, false, -1, 1, seed++);
          const Tensor w = input({C}, DType::f32, false, 0.5, 1.5, seed++);
          const Tensor b = input({C}, DType::f32, false, -1, 1, seed++);
          const Tensor rm0 = input({C}, DType::f32, false, -1, 1, seed++);
          const Tensor rv0 = input({C}, DType::f32, false, 0.5, 2, seed++);
          struct Run {
            Tensor y, mean, invstd, rm, rv, gx, gw, gb;
          };
          const auto run = [&](bool cl) {
            cuda::BatchNormLayout l = layout_of(shape);
            l.channels_last = cl;
            const Shape s = cl ? nhwc : shape;
            const Tensor xs = cl ? to_nhwc(x) : x, gys = cl ? to_nhwc(gy) : gy;
            Run r{output(s, d, mis),
                  output({C}, DType::f32, false),
                  output({C}, DType::f32, false),
                  rm0.clone(),
                  rv0.clone(),
                  output(s, d, mis),
                  output({C}, DType::f32, false),
                  output({C}, DType::f32, false)};
            std::vector<float> ws(
                static_cast<size_t>(cuda::batch_norm_backward_workspace_floats(C)));
            with_float_type(d, [&](auto tag) {
              using T = decltype(tag);
              if (training)
                cuda::batch_norm_forward_training(
                    l, ptr<T>(xs), ptr<T>(r.y), w.data<float>(), b.data<float>(),
                    r.rm.data<float>(), r.rv.data<float>(), 0.1f, 1e-5f, r.mean.data<float>(),
                    r.invstd.data<float>(), nullptr, relu);
              else
                cuda::batch_norm_forward_eval(l, ptr<T>(xs), ptr<T>(r.y), w.data<float>(),
                                              b.data<float>(), r.rm.data<float>(),
                                              r.rv.data<float>(), 1e-5f, r.mean.data<float>(),
                                              r.invstd.data<float>(), nullptr, relu);
              cuda::batch_norm_backward(l, ptr<T>(gys), ptr<T>(xs), w.data<float>(),
                                        r.mean.data<float>(), r.invstd.data<float>(), training,
                                        ptr<T>(r.gx), r.gw.data<float>(), r.gb.data<float>(),
                                        ws.data(), nullptr, relu ? ptr<T>(r.y) : nullptr);
            });
            if (cl) {
              r.y = to_nchw(r.y);
              r.gx = to_nchw(r.gx);
            }
            return r;
          };
          const Run a = run(false), c = run(true);
          require_equal(c.y, a.y, "output");
          require_equal(c.mean, a.mean, "save_mean");
          require_equal(c.invstd, a.invstd, "save_invstd");
          require_equal(c.rm, a.rm, "running_mean");
          require_equal(c.rv, a.rv, "running_var");
          require_equal(c.gx, a.gx, "grad_input");
          require_equal(c.gw, a.gw, "grad_weight");
          require_equal(c.gb, a.gb, "grad_bias");
          // The CPU, as in the tests above (the backward masked by the device's own output), with
          // their bounds: elem_tol and kGradSumTol are derived at the top of this file for K <= 800
          // values per channel, uniform over a width of at most 5; here K = N * H * W <= 360 and x
          // is uniform over [-2, 3), gy over [-1, 1), as there.
          const auto ref = ops::batch_norm_forward(x.to(DType::f32), training ? Tensor() : rm0,
                                                   training ? Tensor() : rv0, w, b,
                                                   {.training = training, .relu = relu});
          require_close(c.y, rounded(ref.output, d), elem_tol(d), "output against the CPU");
          const auto gref = ops::batch_norm_backward(
              gy.to(DType::f32), x.to(DType::f32), w, ref.save_mean, ref.save_invstd, training,
              {true, true, true}, relu ? c.y.to(DType::f32) : Tensor());
          require_close(c.gx, rounded(gref.grad_input, d), elem_tol(d),
                        "grad_input against the CPU");
          require_close(c.gw, gref.grad_weight, kGradSumTol, "grad_weight against the CPU");
          require_close(c.gb, gref.grad_bias, kGradSumTol, "grad_bias against the CPU");
        }
}
