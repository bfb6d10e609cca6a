// Pooling (cuda/kernels/pool.cu) in cuda/emu against ops::max_pool2d_with_indices / avg_pool2d /
// adaptive_avg_pool2d (+ backward), in f32, f16 and bf16 (the CPU reference runs in f32 on the
// same rounded inputs, and its result is rounded to the kernel's dtype), at aligned and misaligned
// (one element off) addresses. Kernels covered: max_pool2d_forward_kernel,
// max_pool2d_backward_kernel, avg_pool2d_forward_kernel, avg_pool2d_backward_kernel,
// adaptive_avg_pool2d_forward_kernel, adaptive_avg_pool2d_backward_kernel.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/kernels/pool.h"
#include "ops/creation.h"
#include "ops/pool.h"
#include "test_kernels_util.h"

namespace {

using namespace stoke;
using kernels_test::input;
using kernels_test::output;
using kernels_test::require_close;
using kernels_test::rounded;

using kernels_test::kFloatDtypes;
using kernels_test::ptr;
using kernels_test::with_float_type;

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
    for (DType d : kFloatDtypes)
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
        with_float_type(d, [&](auto tag) {
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
      for (DType d : kFloatDtypes)
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
          with_float_type(d, [&](auto tag) {
            using T = decltype(tag);
            cuda::avg_pool2d_forward(g, ptr<T>(x), ptr<T>(y), nullptr);
            cuda::avg_pool2d_backward(g, ptr<T>(gy), ptr<T>(gx), nullptr);
          });
          // Bit for bit, then rounded once to the dtype: the same f32 sums in the same order as
          // the CPU (a window's values row by row from 0, then / divisor; the 2x2 stride-2 path's
          // * 0.25 is the same exact scaling), and the backward adds each input's g / divisor in
          // output order on both (cuda/kernels/pool.cu, ops/cpu/pool.cpp).
          kernels_test::require_equal(y, rounded(ref, d), "avg_pool2d");
          const Tensor want = ops::avg_pool2d_backward(gy.to(DType::f32), c.shape, cc.o);
          kernels_test::require_equal(gx, rounded(want, d), "avg_pool2d_backward");
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
    for (DType d : kFloatDtypes)
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
        with_float_type(d, [&](auto tag) {
          using T = decltype(tag);
          cuda::adaptive_avg_pool2d_forward(g, ptr<T>(x), ptr<T>(y), nullptr);
          cuda::adaptive_avg_pool2d_backward(g, ptr<T>(gy), ptr<T>(gx), nullptr);
        });
        // Bit for bit, as avg_pool2d above: the same sums in the same order on both.
        kernels_test::require_equal(y, rounded(ref, d), "adaptive_avg_pool2d");
        const Tensor want = ops::adaptive_avg_pool2d_backward(gy.to(DType::f32), shape);
        kernels_test::require_equal(gx, rounded(want, d), "adaptive_avg_pool2d_backward");
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

// The channels-last instances (Pool2dGeometry::channels_last: every tensor (N, H, W, C)) of
// max_pool2d_forward_kernel, max_pool2d_backward_kernel, avg_pool2d_forward_kernel,
// avg_pool2d_backward_kernel, adaptive_avg_pool2d_forward_kernel and
// adaptive_avg_pool2d_backward_kernel: bit for bit the CPU, as the NCHW instances above (each
// window is taken in the same order; only where its values lie changes).
TEST_CASE("cuda kernels: pooling on channels-last memory equals the CPU bit for bit",
          "[cuda][kernels][pool]") {
  const auto nhwc_of = [](const Shape& s) { return Shape{s[0], s[2], s[3], s[1]}; };
  const auto to_nhwc = [&](const Tensor& t, bool mis) {
    Tensor o = output(nhwc_of(t.shape()), t.dtype(), mis);
    o.copy_(t.permute({0, 2, 3, 1}));
    return o;
  };
  const auto to_nchw = [](const Tensor& t) { return t.permute({0, 3, 1, 2}).contiguous(); };
  std::vector<PoolCase> cases = kPoolCases;
  cases.push_back({{2, 5, 6, 7}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}});
  uint64_t seed = 400;
  for (const PoolCase& c : cases)
    for (DType d : kFloatDtypes) {
      const bool mis = d != DType::f32;
      INFO(describe(c, d, mis));
      const Tensor x = input(c.shape, d, false, -2, 2, seed++);
      const Tensor xh = to_nhwc(x, mis);
      // max: output, indices and the backward.
      const auto ref = ops::max_pool2d_with_indices(x.to(DType::f32), c.o);
      cuda::Pool2dGeometry g = geometry(c, ref.output.shape());
      g.channels_last = true;
      g.channels = c.shape[1];
      const Tensor y = output(nhwc_of(ref.output.shape()), d, mis);
      const Tensor ind = output(nhwc_of(ref.output.shape()), DType::i64, false);
      const Tensor gy = input(ref.output.shape(), d, false, -1, 1, seed++);
      const Tensor gyh = to_nhwc(gy, mis), indh = to_nhwc(ref.indices, false);
      const Tensor gx = output(nhwc_of(c.shape), d, mis);
      // avg (count_include_pad as the case says) and adaptive to (3, 2).
      const Tensor aref = ops::avg_pool2d(x.to(DType::f32), c.o);
      const Tensor ay = output(nhwc_of(aref.shape()), d, mis),
                   agx = output(nhwc_of(c.shape), d, mis);
      const Tensor agy = input(aref.shape(), d, false, -1, 1, seed++);
      const Tensor agyh = to_nhwc(agy, mis);
      const Tensor dref = ops::adaptive_avg_pool2d(x.to(DType::f32), {3, 2});
      cuda::Pool2dGeometry ga{
          .planes = g.planes, .height = g.height, .width = g.width, .out_h = 3, .out_w = 2};
      ga.channels_last = true;
      ga.channels = c.shape[1];
      const Tensor dy = output(nhwc_of(dref.shape()), d, mis),
                   dgx = output(nhwc_of(c.shape), d, mis);
      const Tensor dgy = input(dref.shape(), d, false, -1, 1, seed++);
      const Tensor dgyh = to_nhwc(dgy, mis);
      with_float_type(d, [&](auto tag) {
        using T = decltype(tag);
        cuda::max_pool2d_forward(g, ptr<T>(xh), ptr<T>(y), ind.data<int64_t>(), nullptr);
        cuda::max_pool2d_backward(g, ptr<T>(gyh), indh.data<int64_t>(), ptr<T>(gx), nullptr);
        cuda::avg_pool2d_forward(g, ptr<T>(xh), ptr<T>(ay), nullptr);
        cuda::avg_pool2d_backward(g, ptr<T>(agyh), ptr<T>(agx), nullptr);
        cuda::adaptive_avg_pool2d_forward(ga, ptr<T>(xh), ptr<T>(dy), nullptr);
        cuda::adaptive_avg_pool2d_backward(ga, ptr<T>(dgyh), ptr<T>(dgx), nullptr);
      });
      kernels_test::require_equal(to_nchw(y), rounded(ref.output, d), "max_pool2d output");
      kernels_test::require_equal(to_nchw(ind), ref.indices, "max_pool2d indices");
      kernels_test::require_equal(
          to_nchw(gx),
          rounded(ops::max_pool2d_backward(gy.to(DType::f32), ref.indices, c.shape), d),
          "max_pool2d_backward");
      kernels_test::require_equal(to_nchw(ay), rounded(aref, d), "avg_pool2d");
      kernels_test::require_equal(
          to_nchw(agx), rounded(ops::avg_pool2d_backward(agy.to(DType::f32), c.shape, c.o), d),
          "avg_pool2d_backward");
      kernels_test::require_equal(to_nchw(dy), rounded(dref, d), "adaptive_avg_pool2d");
      kernels_test::require_equal(
          to_nchw(dgx), rounded(ops::adaptive_avg_pool2d_backward(dgy.to(DType::f32), c.shape), d),
          "adaptive_avg_pool2d_backward");
    }
}
