// The implicit-GEMM conv2d forward (cuda/kernels/conv2d_implicit_gemm.cu,
// conv2d_implicit_gemm_kernel) in cuda/emu against ops::conv2d: stride, padding, dilation,
// groups (depthwise included), rectangular kernels, with and without bias, GEMM sizes that are
// not multiples of any tile (GEMM K not a multiple of the 8-deep slab), every tile, and input
// pointers one element off alignment.
#include <catch2/catch.hpp>

#include <cmath>

#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"
#include "ops/conv2d.h"
#include "ops/creation.h"
#include "test_kernels_util.h"

namespace {

using namespace stoke;

struct ConvCase {
  int64_t n, c, h, w, k, r, s;
  std::array<int64_t, 2> stride, pad, dilation;
  int64_t groups;
  bool bias;
};

std::string describe(const ConvCase& t, int tile, bool misaligned) {
  return detail::str_cat("x (", t.n, ", ", t.c, ", ", t.h, ", ", t.w, ") w (", t.k, ", ",
                         t.c / t.groups, ", ", t.r, ", ", t.s, ") stride ", t.stride[0], ",",
                         t.stride[1], " pad ", t.pad[0], ",", t.pad[1], " dilation ", t.dilation[0],
                         ",", t.dilation[1], " groups ", t.groups, t.bias ? " bias" : "", " tile ",
                         tile, misaligned ? " misaligned" : "");
}

cuda::Conv2dGeometry geometry(const ConvCase& t) {
  return {.batch = t.n,
          .channels = t.c,
          .height = t.h,
          .width = t.w,
          .out_channels = t.k,
          .kernel_h = t.r,
          .kernel_w = t.s,
          .stride_h = t.stride[0],
          .stride_w = t.stride[1],
          .pad_h = t.pad[0],
          .pad_w = t.pad[1],
          .dilation_h = t.dilation[0],
          .dilation_w = t.dilation[1],
          .groups = t.groups};
}

void check_conv(const ConvCase& t, int tile, bool misaligned, uint64_t seed) {
  INFO(describe(t, tile, misaligned));
  const Tensor x = kernels_test::input({t.n, t.c, t.h, t.w}, DType::f32, misaligned, -1, 1, seed);
  const Tensor w =
      kernels_test::input({t.k, t.c / t.groups, t.r, t.s}, DType::f32, misaligned, -1, 1, seed + 1);
  const Tensor b =
      t.bias ? kernels_test::input({t.k}, DType::f32, misaligned, -1, 1, seed + 2) : Tensor();
  const Tensor want = ops::conv2d(
      x, w, b, {.stride = t.stride, .padding = t.pad, .dilation = t.dilation, .groups = t.groups});
  const auto out = cuda::conv2d_implicit_gemm_output_size(geometry(t));
  REQUIRE(Shape{t.n, t.k, out[0], out[1]} == want.shape());
  const Tensor y = kernels_test::output(want.shape(), DType::f32, misaligned);
  cuda::conv2d_implicit_gemm_forward(geometry(t), x.data<float>(), w.data<float>(),
                                     t.bias ? b.data<float>() : nullptr, y.data<float>(), nullptr,
                                     tile);
  // Each output sums K = c / groups * r * s products of values uniform in [-1, 1] (random signs,
  // E (x w)^2 = 1/9) in another order than the CPU's direct or im2col kernels (fewer than 32
  // channels: no Winograd): the difference within 6u sqrt(K / 3 * K / 9) (six standard deviations
  // of two random-walk rounding errors, u = 2^-24), and the bias's addition 2u of |y| <= K.
  const double k = static_cast<double>(t.c / t.groups * t.r * t.s);
  const double atol = 6 * kernels_test::kU * std::sqrt(k / 3 * k / 9);
  kernels_test::require_close(y, want, {2 * kernels_test::kU, atol}, "y");
}

}  // namespace

TEST_CASE("cuda kernels: conv2d_implicit_gemm_kernel matches ops::conv2d",
          "[cuda][kernels][conv2d]") {
  const std::vector<ConvCase> cases = {
      // 3x3 "same" convolution; GEMM M = 98, N = 5, K = 27.
      {2, 3, 7, 7, 5, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
      // Rectangular kernel, per-dim stride/padding/dilation, 2 groups, no bias.
      {1, 4, 9, 8, 6, 3, 2, {2, 1}, {1, 0}, {1, 2}, 2, false},
      // Grouped 1x1.
      {3, 6, 5, 6, 6, 1, 1, {1, 1}, {0, 0}, {1, 1}, 3, true},
      // Depthwise (groups = C = K), stride 2, dilation 2.
      {2, 4, 10, 9, 4, 3, 3, {2, 2}, {1, 1}, {2, 2}, 4, true},
      // GEMM K = 153 (not a multiple of 8), N = 33 (one past the 32 tile).
      {1, 17, 6, 6, 33, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
      // 5x5 kernel, stride 3, padding 2; output 4x4.
      {2, 3, 12, 12, 8, 5, 5, {3, 3}, {2, 2}, {1, 1}, 1, true},
      // A batch whose GEMM M (3 * 10 * 10 = 300) spans several 128-row tiles.
      {3, 2, 10, 10, 3, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false},
  };
  uint64_t seed = 1;
  for (const ConvCase& t : cases)
    for (int tile : cuda::conv2d_implicit_gemm_tile_sizes()) {
      check_conv(t, tile, false, seed);
      check_conv(t, tile, true, seed + 7);
      seed += 10;
    }
}

TEST_CASE("cuda kernels: conv2d_implicit_gemm defaults, empty batch and bad geometry",
          "[cuda][kernels][conv2d]") {
  CHECK(cuda::conv2d_implicit_gemm_tile_sizes().front() == 64);
  check_conv({1, 3, 5, 5, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true}, 0, false, 99);

  ConvCase empty{0, 3, 5, 5, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true};
  CHECK_NOTHROW(cuda::conv2d_implicit_gemm_forward(geometry(empty), nullptr, nullptr, nullptr,
                                                   nullptr, nullptr));

  std::vector<float> buf(1024, 0.f);
  auto run = [&](const ConvCase& t, int tile) {
    cuda::conv2d_implicit_gemm_forward(geometry(t), buf.data(), buf.data(), nullptr, buf.data(),
                                       nullptr, tile);
  };
  CHECK_THROWS_WITH(run({1, 3, 5, 5, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 2, false}, 0),
                    Catch::Contains("cuda::conv2d_implicit_gemm") &&
                        Catch::Contains("divisible by groups") && Catch::Contains("groups 2"));
  CHECK_THROWS_WITH(run({1, 2, 3, 3, 2, 3, 3, {1, 1}, {0, 0}, {2, 2}, 1, false}, 0),
                    Catch::Contains("smaller than the dilated kernel 3x3"));
  CHECK_THROWS_WITH(run({1, 2, 4, 4, 2, 3, 3, {0, 1}, {0, 0}, {1, 1}, 1, false}, 0),
                    Catch::Contains("expected stride >= 1"));
  CHECK_THROWS_WITH(run({1, 2, 4, 4, 2, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, false}, 48),
                    Catch::Contains("expected tile 32, 64, 128") && Catch::Contains("got 48"));
}
