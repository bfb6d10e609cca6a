// Pooling (cuda/kernels/pool.cu) and batch norm (cuda/kernels/batch_norm.cu) in cuda/emu against
// ops::max_pool2d_with_indices / avg_pool2d / adaptive_avg_pool2d (+ backward) and
// ops::batch_norm_forward / batch_norm_backward, in f32, f16 and bf16 (the CPU reference runs in
// f32 on the same rounded inputs, and its result is rounded to the kernel's dtype), at aligned
// and misaligned (one element off) addresses. Kernels covered: max_pool2d_forward_kernel,
// max_pool2d_backward_kernel, avg_pool2d_forward_kernel, avg_pool2d_backward_kernel,
// adaptive_avg_pool2d_forward_kernel, adaptive_avg_pool2d_backward_kernel,
// batch_norm_stats_kernel, batch_norm_apply_kernel, batch_norm_backward_reduce_kernel,
// batch_norm_backward_input_kernel.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/kernels/batch_norm.h"
#include "cuda/kernels/pool.h"
#include "ops/creation.h"
#include "ops/batch_norm.h"
#include "ops/pool.h"
#include "test_kernels_util.h"

namespace {

using namespace stoke;
using kernels_test::input;
using kernels_test::output;
using kernels_test::require_close;
using kernels_test::rounded;

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

// Calls f(T{}) with the CUDA element type of dtype.
template <class F>
void with_type(DType d, F&& f) {
  if (d == DType::f32) f(float{});
  if (d == DType::f16) f(__half{});
  if (d == DType::bf16) f(__nv_bfloat16{});
}

template <class T>
T* ptr(const Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// ---- pooling ---------------------------------------------------------------------------------

struct PoolCase {
  Shape shape;  // (N, C, H, W)
  Pool2dOptions o;
};

std::string describe(const PoolCase& c, DType d, bool misaligned) {
  return detail::str_cat("input ", c.shape, " kernel ", c.o.kernel_size[0], ",", c.o.kernel_size[1],
                         " stride ", c.o.stride[0], ",", c.o.stride[1], " padding ", c.o.padding[0],
                         ",", c.o.padding[1], c.o.ceil_mode ? " ceil_mode" : "",
                         c.o.count_include_pad ? " count_include_pad" : "", " ", dtype_name(d),
                         misaligned ? " misaligned" : "");
}

cuda::Pool2dGeometry geometry(const PoolCase& c, const Shape& out) {
  const auto& o = c.o;
  return {.planes = c.shape[0] * c.shape[1],
          .height = c.shape[2],
          .width = c.shape[3],
          .out_h = out[2],
          .out_w = out[3],
          .kernel_h = o.kernel_size[0],
          .kernel_w = o.kernel_size[1],
          .stride_h = o.stride[0] == 0 ? o.kernel_size[0] : o.stride[0],
          .stride_w = o.stride[1] == 0 ? o.kernel_size[1] : o.stride[1],
          .pad_h = o.padding[0],
          .pad_w = o.padding[1],
          .count_include_pad = o.count_include_pad};
}

const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 7, 9}, {.kernel_size = {2, 2}, .stride = {2, 2}}},
    {{1, 2, 9, 8}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}},
    {{2, 2, 8, 7},
     {.kernel_size = {3, 2}, .stride = {1, 2}, .padding = {1, 1}, .count_include_pad = false}},
    {{1, 3, 11, 10},
     {.kernel_size = {4, 3},
      .stride = {3, 2},
      .padding = {2, 1},
      .ceil_mode = true,
      .count_include_pad = false}},
    {{3, 1, 5, 6}, {.kernel_size = {5, 5}, .padding = {2, 2}}},  // stride 0: the kernel size
};

}  // namespace

TEST_CASE("cuda kernels: max_pool2d_forward_kernel and max_pool2d_backward_kernel match ops::",
          "[cuda][kernels][pool]") {
  uint64_t seed = 1;
  for (const PoolCase& c : kPoolCases)
    for (DType d : kDtypes)
      for (bool mis : {false, true}) {
        INFO(describe(c, d, mis));
        // bf16/f16 rounding of values in [-2, 2] makes ties: the first maximum must win.
        const Tensor x = input(c.shape, d, mis, -2, 2, seed++);
        const auto ref = ops::max_pool2d_with_indices(x.to(DType::f32), c.o);
        const auto g = geometry(c, ref.output.shape());
        const Tensor y = output(ref.output.shape(), d, mis);
        const Tensor ind = output(ref.output.shape(), DType::i64, false);
        const Tensor gy = input(ref.output.shape(), d, mis, -1, 1, seed++);
        const Tensor gx = output(c.shape, d, mis);
        with_type(d, [&](auto tag) {
          using T = decltype(tag);
          cuda::max_pool2d_forward(g, ptr<T>(x), ptr<T>(y), ind.data<int64_t>(), nullptr);
          cuda::max_pool2d_backward(g, ptr<T>(gy), ref.indices.data<int64_t>(), ptr<T>(gx),
                                    nullptr);
        });
        kernels_test::require_equal(y, rounded(ref.output, d), "max_pool2d output");
        kernels_test::require_equal(ind, ref.indices, "max_pool2d indices");
        // The gather sums in the CPU scatter's order, in f32, and rounds once.
        const Tensor want = ops::max_pool2d_backward(gy.to(DType::f32), ref.indices, c.shape);
        kernels_test::require_equal(gx, rounded(want, d), "max_pool2d_backward");
      }
}

TEST_CASE("cuda kernels: max_pool2d_forward_kernel propagates NaN like the CPU",
          "[cuda][kernels][pool]") {
  const PoolCase c{{1, 1, 4, 6}, {.kernel_size = {2, 3}, .stride = {1, 2}, .padding = {1, 1}}};
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7) % 11) - 5.f;
  v[3] = NAN;
  v[8] = NAN;
  v[20] = INFINITY;
  v[13] = -INFINITY;
  const Tensor x = from_vector(v, c.shape);
  const auto ref = ops::max_pool2d_with_indices(x, c.o);
  const Tensor y = output(ref.output.shape(), DType::f32, false);
  const Tensor ind = output(ref.output.shape(), DType::i64, false);
  cuda::max_pool2d_forward(geometry(c, ref.output.shape()), x.data<float>(), y.data<float>(),
                           ind.data<int64_t>(), nullptr);
  kernels_test::require_equal(y, ref.output, "output");
  kernels_test::require_equal(ind, ref.indices, "indices");
  // Without indices the kernel still pools.
  const Tensor y2 = output(ref.output.shape(), DType::f32, false);
  cuda::max_pool2d_forward(geometry(c, ref.output.shape()), x.data<float>(), y2.data<float>(),
                           nullptr, nullptr);
  kernels_test::require_equal(y2, ref.output, "output without indices");
}

TEST_CASE("cuda kernels: avg_pool2d_forward_kernel and avg_pool2d_backward_kernel match ops::",
          "[cuda][kernels][pool]") {
  uint64_t seed = 50;
  for (const PoolCase& c : kPoolCases)
    for (bool include_pad : {true, false})
      for (DType d : kDtypes)
        for (bool mis : {false, true}) {
          PoolCase cc = c;
          cc.o.count_include_pad = include_pad;
          INFO(describe(cc, d, mis));
          const Tensor x = input(c.shape, d, mis, -2, 2, seed++);
          const Tensor ref = ops::avg_pool2d(x.to(DType::f32), cc.o);
          const auto g = geometry(cc, ref.shape());
          const Tensor y = output(ref.shape(), d, mis);
          const Tensor gy = input(ref.shape(), d, mis, -1, 1, seed++);
          const Tensor gx = output(c.shape, d, mis);
          with_type(d, [&](auto tag) {
            using T = decltype(tag);
            cuda::avg_pool2d_forward(g, ptr<T>(x), ptr<T>(y), nullptr);
            cuda::avg_pool2d_backward(g, ptr<T>(gy), ptr<T>(gx), nullptr);
          });
          // Same f32 sums in the same order as the CPU: equal up to the final rounding.
          require_close(y, rounded(ref, d), kernels_test::tol(d), "avg_pool2d");
          const Tensor want = ops::avg_pool2d_backward(gy.to(DType::f32), c.shape, cc.o);
          require_close(gx, rounded(want, d), kernels_test::tol(d), "avg_pool2d_backward");
        }
}

TEST_CASE(
    "cuda kernels: adaptive_avg_pool2d_forward_kernel and adaptive_avg_pool2d_backward_kernel "
    "match ops::",
    "[cuda][kernels][pool]") {
  const std::vector<std::pair<Shape, std::array<int64_t, 2>>> cases = {
      {{2, 3, 7, 9}, {3, 4}}, {{1, 2, 5, 5}, {5, 5}}, {{2, 1, 6, 10}, {4, 3}},
      {{1, 2, 3, 4}, {5, 7}}, {{3, 2, 8, 8}, {1, 1}},
  };
  uint64_t seed = 200;
  for (const auto& [shape, size] : cases)
    for (DType d : kDtypes)
      for (bool mis : {false, true}) {
        INFO(detail::str_cat("input ", shape, " output ", size[0], "x", size[1], " ", dtype_name(d),
                             mis ? " misaligned" : ""));
        const Tensor x = input(shape, d, mis, -2, 2, seed++);
        const Tensor ref = ops::adaptive_avg_pool2d(x.to(DType::f32), size);
        const cuda::Pool2dGeometry g{.planes = shape[0] * shape[1],
                                     .height = shape[2],
                                     .width = shape[3],
                                     .out_h = size[0],
                                     .out_w = size[1]};
        const Tensor y = output(ref.shape(), d, mis);
        const Tensor gy = input(ref.shape(), d, mis, -1, 1, seed++);
        const Tensor gx = output(shape, d, mis);
        with_type(d, [&](auto tag) {
          using T = decltype(tag);
          cuda::adaptive_avg_pool2d_forward(g, ptr<T>(x), ptr<T>(y), nullptr);
          cuda::adaptive_avg_pool2d_backward(g, ptr<T>(gy), ptr<T>(gx), nullptr);
        });
        require_close(y, rounded(ref, d), kernels_test::tol(d), "adaptive_avg_pool2d");
        const Tensor want = ops::adaptive_avg_pool2d_backward(gy.to(DType::f32), shape);
        require_close(gx, rounded(want, d), kernels_test::tol(d), "adaptive_avg_pool2d_backward");
      }
}

TEST_CASE("cuda kernels: pooling launchers reject bad geometry with messages",
          "[cuda][kernels][pool]") {
  std::vector<float> buf(256, 0.f);
  cuda::Pool2dGeometry g{.planes = 1,
                         .height = 4,
                         .width = 4,
                         .out_h = 2,
                         .out_w = 2,
                         .kernel_h = 2,
                         .kernel_w = 2,
                         .stride_h = 2,
                         .stride_w = 2};
  CHECK_NOTHROW(cuda::max_pool2d_forward(g, buf.data(), buf.data() + 64, nullptr, nullptr));
  cuda::Pool2dGeometry bad = g;
  bad.pad_h = 2;
  CHECK_THROWS_WITH(cuda::avg_pool2d_forward(bad, buf.data(), buf.data() + 64, nullptr),
                    Catch::Contains("cuda::avg_pool2d") &&
                        Catch::Contains("at most half the kernel size") &&
                        Catch::Contains("got padding 2,0"));
  bad = g;
  bad.out_w = 3;  // the last window would start past the input
  CHECK_THROWS_WITH(cuda::max_pool2d_forward(bad, buf.data(), buf.data() + 64, nullptr, nullptr),
                    Catch::Contains("windows that start inside the padded input"));
  bad = g;
  bad.stride_w = 0;
  CHECK_THROWS_WITH(cuda::max_pool2d_backward(bad, buf.data(), nullptr, buf.data(), nullptr),
                    Catch::Contains("expected kernel_size >= 1 and stride >= 1"));
  bad = g;
  bad.out_h = 0;
  CHECK_THROWS_WITH(cuda::adaptive_avg_pool2d_forward(bad, buf.data(), buf.data(), nullptr),
                    Catch::Contains("cuda::adaptive_avg_pool2d") && Catch::Contains("output 0x2"));
}

// ---- batch norm ------------------------------------------------------------------------------

namespace {

cuda::BatchNormLayout layout_of(const Shape& s) {
  int64_t spatial = 1;
  for (size_t d = 2; d < s.size(); ++d) spatial *= s[d];
  return {.batch = s[0], .channels = s[1], .spatial = spatial};
}

const std::vector<Shape> kBnShapes = {
    {5, 3}, {2, 3, 5, 7}, {4, 2, 3}, {3, 4, 17, 1}, {2, 1, 20, 20}};

// Tolerance for per-channel f32 results (statistics, weight/bias gradients): the kernel sums in
// f32 registers, the CPU in double.
constexpr kernels_test::Tolerance kStatTol{1e-4, 1e-5};

// Elementwise results: f32 math on both sides, then one rounding to the dtype.
kernels_test::Tolerance elem_tol(DType d) {
  return d == DType::f32 ? kernels_test::Tolerance{1e-4, 2e-5} : kernels_test::tol(d);
}

}  // namespace

TEST_CASE(
    "cuda kernels: batch_norm_stats_kernel and batch_norm_apply_kernel (training) match "
    "ops::batch_norm_forward",
    "[cuda][kernels][batch_norm]") {
  uint64_t seed = 1;
  for (const Shape& shape : kBnShapes)
    for (DType d : kDtypes)
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
          with_type(d, [&](auto tag) {
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
    for (DType d : kDtypes) {
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
      with_type(d, [&](auto tag) {
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
      with_type(d, [&](auto tag) {
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
    for (DType d : kDtypes)
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
          with_type(d, [&](auto tag) {
            using T = decltype(tag);
            cuda::batch_norm_backward(layout_of(shape), ptr<T>(gy), ptr<T>(x), w.data<float>(),
                                      fwd.save_mean.data<float>(), fwd.save_invstd.data<float>(),
                                      training, ptr<T>(gx), gw.data<float>(), gb.data<float>(),
                                      ws.data(), nullptr);
          });
          require_close(gw, ref.grad_weight, kStatTol, "grad_weight");
          require_close(gb, ref.grad_bias, kStatTol, "grad_bias");
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
