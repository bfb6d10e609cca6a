#include <catch2/catch.hpp>

#include <array>
#include <cmath>

#include "ops/conv2d.h"
#include "ops/cpu/conv2d_kernels.h"
#include "stoke/stoke.h"
#include "support/conv_reference.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using namespace stoke::testing;

namespace {

ops::Conv2dOptions fixture_options(const testing::FixtureCase& c) {
  const auto s = c.attr_ints("stride"), p = c.attr_ints("padding"), d = c.attr_ints("dilation");
  return {.stride = {s[0], s[1]},
          .padding = {p[0], p[1]},
          .dilation = {d[0], d[1]},
          .groups = c.attr_int("groups")};
}

}  // namespace

TEST_CASE("conv2d: PyTorch fixtures, forward and all three gradients", "[ops][conv][fixture]") {
  // The fixtures are f64 results rounded to f32 (u |want|); stoke's f32 kernels add their sums'
  // rounding, bounded by testing::sum_error_factor for each element's count of terms (growth 8 for
  // the layers Winograd may take).
  const auto cases = testing::load_fixture(testing::fixture_path("conv2d.txt"));
  REQUIRE(cases.size() == 11);
  const double u = testing::unit_roundoff(DType::f32);
  for (const auto& c : cases) {
    INFO("case " << c.name);
    const ops::Conv2dOptions o = fixture_options(c);
    Tensor x = testing::to_tensor(c.tensor("input")), w = testing::to_tensor(c.tensor("weight"));
    Tensor b = c.attr_int("bias") ? testing::to_tensor(c.tensor("bias")) : Tensor();
    Tensor g = testing::to_tensor(c.tensor("grad_out"));
    const Tensor y = ops::conv2d(x, w, b, o);
    const AbsSums abs = abs_sums(g, x, w, b, o);
    const TermCounts n = term_counts(x.shape(), w.shape(), y.shape(), o.groups);
    const double growth = winograd_growth(x.shape(), w.shape(), o);
    auto factor = [&](int64_t terms) {
      return growth * testing::sum_error_factor(terms, DType::f32);
    };
    auto want = [&](const char* name) { return testing::to_tensor(c.tensor(name)); };
    CHECK(testing::max_bound_ratio(y, want("output"), abs.output, factor(n.output), u) <= 1);
    ops::Conv2dGrads r = ops::conv2d_backward(g, x, w, o, true, true, b.defined());
    CHECK(testing::max_bound_ratio(r.grad_input, want("grad_input"), abs.input, factor(n.input),
                                   u) <= 1);
    CHECK(testing::max_bound_ratio(r.grad_weight, want("grad_weight"), abs.weight, factor(n.weight),
                                   u) <= 1);
    // The single-gradient entry points may take other kernels: each against the fixture too.
    CHECK(testing::max_bound_ratio(ops::conv2d_backward_input(g, x, w, o), want("grad_input"),
                                   abs.input, factor(n.input), u) <= 1);
    CHECK(testing::max_bound_ratio(ops::conv2d_backward_weight(g, x, w, o), want("grad_weight"),
                                   abs.weight, factor(n.weight), u) <= 1);
    if (b.defined()) {
      CHECK(testing::max_bound_ratio(r.grad_bias, want("grad_bias"), abs.bias, factor(n.weight),
                                     u) <= 1);
      CHECK(testing::max_bound_ratio(ops::conv2d_backward_bias(g), want("grad_bias"), abs.bias,
                                     factor(n.weight), u) <= 1);
    } else {
      CHECK_FALSE(r.grad_bias.defined());
    }
  }
}

TEST_CASE("conv2d: larger shapes against a naive loop, every code path", "[ops][conv]") {
  struct Case {
    const char* name;
    Shape x, w;
    ops::Conv2dOptions o;
  };
  const Case cases[] = {
      {"generic batch", {6, 5, 11, 9}, {7, 5, 3, 3}, {.padding = {1, 1}}},
      {"generic N=1 (split GEMM)", {1, 64, 16, 16}, {64, 64, 3, 3}, {.padding = {1, 1}}},
      {"strided, dilated, grouped",
       {4, 6, 13, 12},
       {9, 2, 3, 2},
       {.stride = {2, 3}, .padding = {2, 1}, .dilation = {2, 1}, .groups = 3}},
      {"pointwise", {5, 16, 7, 6}, {24, 16, 1, 1}, {}},
      {"pointwise grouped N=1", {1, 64, 20, 20}, {128, 32, 1, 1}, {.groups = 2}},
      {"1x1 stride 2 (im2col)", {3, 8, 9, 9}, {4, 8, 1, 1}, {.stride = {2, 2}}},
      {"depthwise", {3, 8, 12, 10}, {8, 1, 3, 3}, {.padding = {1, 1}, .groups = 8}},
      {"depthwise strided dilated",
       {2, 6, 15, 14},
       {6, 1, 5, 3},
       {.stride = {2, 2}, .padding = {2, 3}, .dilation = {1, 2}, .groups = 6}},
      {"depthwise multiplier 2 (generic)",
       {2, 4, 8, 8},
       {8, 1, 3, 3},
       {.padding = {1, 1}, .groups = 4}},
      // Unit column stride, output narrower or wider than the input (short-row im2col): rows of
      // 10 (vector + overlapping vector), 5 (scalar), 21 (three vectors) and padding wider than
      // the kernel reach (whole taps in the padding).
      {"unit-stride 5x5 valid (LeNet conv2)", {3, 6, 14, 14}, {16, 6, 5, 5}, {}},
      {"unit-stride narrow rows", {2, 3, 9, 7}, {4, 3, 3, 3}, {}},
      {"unit-stride wide rows, stride-2 rows",
       {2, 3, 12, 23},
       {5, 3, 3, 3},
       {.stride = {2, 1}, .padding = {0, 0}}},
      {"unit-stride padding beyond the kernel", {2, 2, 5, 6}, {3, 2, 3, 3}, {.padding = {3, 3}}},
      // Kernel taps that only ever meet padding are cut off (ops/cpu/conv2d.cpp, live_conv):
      // 3x3 on a 1x1 plane (a 1x1 convolution with the center tap), taps dead on one side only,
      // strided and dilated hulls, grouped.
      {"dead taps: 3x3 on 1x1", {4, 16, 1, 1}, {8, 16, 3, 3}, {.padding = {1, 1}}},
      {"dead taps: 5x5 on 2x3", {3, 4, 2, 3}, {5, 4, 5, 5}, {.padding = {2, 2}}},
      {"dead taps: one-sided, strided, dilated",
       {2, 3, 3, 5},
       {4, 3, 3, 3},
       {.stride = {2, 2}, .padding = {2, 1}, .dilation = {2, 1}}},
      {"dead taps: grouped", {2, 4, 1, 2}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {"1x1 planes, batch > 16 (one GEMM)", {40, 24, 1, 1}, {20, 24, 1, 1}, {}},
      // Planes of 2 to 16 outputs whose kernels hang over the padding (batch >= 8): one GEMM per
      // output position and kernel row (ops/cpu/conv2d_positions.cpp). VGG's 3x3 planes, 2x2,
      // strided 4x4, an asymmetric kernel with positions of different live spans, and 13
      // samples (two chunks of unequal size).
      {"small planes: 3x3 on 3x3", {10, 12, 3, 3}, {7, 12, 3, 3}, {.padding = {1, 1}}},
      {"small planes: 3x3 on 2x2", {9, 5, 2, 2}, {6, 5, 3, 3}, {.padding = {1, 1}}},
      {"small planes: strided 4x4",
       {8, 4, 7, 7},
       {5, 4, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}}},
      {"small planes: 5x3 kernel on 3x4", {8, 3, 3, 4}, {4, 3, 5, 3}, {.padding = {2, 1}}},
      {"small planes: 13 samples", {13, 16, 3, 3}, {9, 16, 3, 3}, {.padding = {1, 1}}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    for (DType dt : {DType::f32, DType::f64}) {
      INFO(dt);
      Tensor x = randn(c.x, {.dtype = dt}), w = randn(c.w, {.dtype = dt});
      Tensor b = randn({c.w[0]}, {.dtype = dt});
      Tensor y = ops::conv2d(x, w, b, c.o);
      CHECK(y.dtype() == dt);
      // Each output a sum of n products and the bias (sum_error_factor); in f64 the naive loop
      // rounds as well, so twice the bound.
      const int64_t n = term_counts(c.x, c.w, y.shape(), c.o.groups).output;
      const double factor = (dt == DType::f64 ? 2 : 1) * winograd_growth(c.x, c.w, c.o) *
                            testing::sum_error_factor(n, dt);
      CHECK(testing::max_bound_ratio(y, naive_conv2d(x, w, b, c.o),
                                     naive_conv2d(abs64(x), abs64(w), abs64(b), c.o), factor) <= 1);
      CHECK(testing::max_bound_ratio(ops::conv2d(x, w, Tensor(), c.o),
                                     naive_conv2d(x, w, Tensor(), c.o),
                                     naive_conv2d(abs64(x), abs64(w), Tensor(), c.o), factor) <= 1);
    }
  }
}

TEST_CASE("conv2d: backward against the naive adjoint loop in f64", "[ops][conv]") {
  // grad_input and grad_weight against naive_conv2d_backward, grad_bias against a sum over
  // (N, OH, OW); both sides round in f64, so twice sum_error_factor's bound.
  struct Case {
    Shape x, w;
    ops::Conv2dOptions o;
  };
  const Case cases[] = {
      {{5, 6, 10, 9}, {4, 6, 3, 3}, {.padding = {1, 1}}},
      {{1, 32, 12, 12}, {64, 32, 3, 3}, {.padding = {1, 1}}},
      {{4, 6, 11, 9},
       {6, 3, 3, 2},
       {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2}},
      {{3, 8, 6, 7}, {5, 8, 1, 1}, {}},
      {{3, 8, 9, 9}, {8, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 8}},
      {{3, 6, 14, 14}, {16, 6, 5, 5}, {}},
      {{2, 3, 12, 23}, {5, 3, 3, 3}, {.stride = {2, 1}, .padding = {0, 2}}},
      {{2, 2, 5, 6}, {3, 2, 3, 3}, {.padding = {3, 3}}},
      {{4, 16, 1, 1}, {8, 16, 3, 3}, {.padding = {1, 1}}},
      {{3, 4, 2, 3}, {5, 4, 5, 5}, {.padding = {2, 2}}},
      {{2, 3, 3, 5}, {4, 3, 3, 3}, {.stride = {2, 2}, .padding = {2, 1}, .dilation = {2, 1}}},
      {{2, 4, 1, 2}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {{40, 24, 1, 1}, {20, 24, 3, 3}, {.padding = {1, 1}}},
      {{10, 12, 3, 3}, {7, 12, 3, 3}, {.padding = {1, 1}}},
      {{9, 5, 2, 2}, {6, 5, 3, 3}, {.padding = {1, 1}}},
      {{8, 4, 7, 7}, {5, 4, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {{8, 3, 3, 4}, {4, 3, 5, 3}, {.padding = {2, 1}}},
      {{13, 16, 3, 3}, {9, 16, 3, 3}, {.padding = {1, 1}}}};
  for (const Case& c : cases) {
    INFO("x " << c.x << " w " << c.w);
    const TensorOptions f64{.dtype = DType::f64};
    Tensor x = randn(c.x, f64), w = randn(c.w, f64);
    Tensor y = ops::conv2d(x, w, Tensor(), c.o);
    Tensor g = randn(y.shape(), f64);
    ops::Conv2dGrads r = ops::conv2d_backward(g, x, w, c.o, true, true, true);
    const NaiveGrads want = naive_conv2d_backward(g, x, w, c.o);
    const AbsSums abs = abs_sums(g, x, w, Tensor(), c.o);
    const TermCounts n = term_counts(c.x, c.w, y.shape(), c.o.groups);
    auto factor = [](int64_t terms) { return 2 * testing::sum_error_factor(terms, DType::f64); };
    CHECK(testing::max_bound_ratio(r.grad_input, want.input, abs.input, factor(n.input)) <= 1);
    CHECK(testing::max_bound_ratio(r.grad_weight, want.weight, abs.weight, factor(n.weight)) <= 1);
    CHECK(testing::max_bound_ratio(r.grad_bias, ops::sum(g, {0, 2, 3}), abs.bias,
                                   factor(n.weight)) <= 1);
  }
}

TEST_CASE("conv2d: f32 shapes of the direct (stride 1 and 2) and Winograd kernels against f64",
          "[ops][conv]") {
  // On CPUs with AVX-512, f32 stride-1 convolutions with >= 64 multiply-adds per output run the
  // direct kernels of ops/cpu/conv2d_direct.cpp (forward, input gradient, and for small layers on
  // planes of 14x14 and up the weight gradient; 3x3 layers with 16+ channels in and out take
  // Winograd's backward instead), stride-2 ones with a spatial kernel the
  // channel-blocked kernels of ops/cpu/conv2d_blocked.cpp (forward and both gradients); f64 runs
  // im2col + GEMM. Shapes: output channels not a multiple of the register tile, 5x5,
  // asymmetric kernel and padding, padding beyond the kernel's reach (the input gradient's grid
  // then clips grad_out).
  struct Case {
    const char* name;
    Shape x, w;
    ops::Conv2dOptions o;
  };
  const Case cases[] = {
      {"13 output channels", {3, 16, 12, 10}, {13, 16, 3, 3}, {.padding = {1, 1}}},
      {"5x5 valid", {2, 8, 14, 13}, {10, 8, 5, 5}, {}},
      {"3x5, padding 1x2", {2, 12, 9, 11}, {6, 12, 3, 5}, {.padding = {1, 2}}},
      {"padding 3 on 3x3", {2, 16, 8, 8}, {8, 16, 3, 3}, {.padding = {3, 3}}},
      {"ResNet 7x7", {4, 64, 7, 7}, {64, 64, 3, 3}, {.padding = {1, 1}}},
      // 25 multiply-adds per output suffice for 5x5 kernels: LeNet-5's 1-channel stem.
      {"LeNet 5x5 stem, 1 channel", {3, 1, 28, 28}, {6, 1, 5, 5}, {.padding = {2, 2}}},
      // ResNet's 16- and 24-channel layers: the direct forward, Winograd's backward (from 16
      // channels in and out).
      {"ResNet 28x28", {3, 16, 28, 28}, {16, 16, 3, 3}, {.padding = {1, 1}}},
      {"ResNet 14x14, 13 samples", {13, 32, 14, 14}, {24, 32, 3, 3}, {.padding = {1, 1}}},
      // The direct weight gradient (fewer than 16 output channels): one sample per block of grids
      // (28x28), four per block with a partial last block (14x14, 13 samples).
      {"12 outputs, 28x28", {3, 16, 28, 28}, {12, 16, 3, 3}, {.padding = {1, 1}}},
      {"12 outputs, 14x14, 13 samples", {13, 32, 14, 14}, {12, 32, 3, 3}, {.padding = {1, 1}}},
      // Stride 2 (the blocked kernels): ResNet's downsampling layers, odd input sizes (phases of
      // unequal size), 5x5 with padding 2, 4x4 without padding; 80 output channels and 20 input
      // channels (channel vectors in groups of 2, 2 and 1, a partial vector) on rows of 23
      // outputs (two tiles of 12 and 11); one input channel; a 1x3 kernel (phases of the input
      // gradient that no tap reaches); 2x2 with 15 and 17 channels.
      {"stride 2: ResNet 28x28",
       {3, 16, 28, 28},
       {32, 16, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}}},
      {"stride 2: ResNet 14x14",
       {5, 32, 14, 14},
       {64, 32, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}}},
      {"stride 2: odd 15x13",
       {2, 16, 15, 13},
       {13, 16, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}}},
      {"stride 2: 5x5 padding 2",
       {2, 8, 12, 12},
       {10, 8, 5, 5},
       {.stride = {2, 2}, .padding = {2, 2}}},
      {"stride 2: 4x4 valid", {2, 8, 30, 31}, {8, 8, 4, 4}, {.stride = {2, 2}}},
      {"stride 2: 80 outputs, 30x23",
       {2, 20, 59, 45},
       {80, 20, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}}},
      {"stride 2: one input channel",
       {3, 1, 16, 16},
       {16, 1, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}}},
      {"stride 2: 1x3, padding 0x1",
       {2, 8, 9, 10},
       {12, 8, 1, 3},
       {.stride = {2, 2}, .padding = {0, 1}}},
      {"stride 2: 2x2, 15 -> 17 channels", {3, 15, 8, 8}, {17, 15, 2, 2}, {.stride = {2, 2}}},
      // Thin stride-1 layers (fewer than 64 multiply-adds per output). 3x3 ones run the row
      // kernels of conv2d_thin.cpp: the forward (up to 32 outputs, in tiles of 16 channels) and
      // the weight gradient (tiles of 3 channels): rows of 28 and 19 (a last segment that
      // overlaps the one before: 12 and 3 new outputs), 13 (narrower than a vector: masked), 33
      // (one new output), 32; no padding, padding 2; one sample. Other kernels take the blocked
      // forward (up to 32 outputs) and weight gradient, one kernel row's taps and channels in one
      // tile.
      {"thin: 1-channel 3x3 stem", {3, 1, 28, 28}, {16, 1, 3, 3}, {.padding = {1, 1}}},
      {"thin: 3 channels, 40 outputs", {2, 3, 17, 19}, {40, 3, 3, 3}, {.padding = {1, 1}}},
      {"thin: 3 channels, 20 outputs, 13 wide", {2, 3, 12, 13}, {20, 3, 3, 3}, {.padding = {1, 1}}},
      {"thin: 7 channels, 32 outputs, valid", {2, 7, 20, 35}, {32, 7, 3, 3}, {}},
      {"thin: one sample, padding 2", {1, 2, 9, 30}, {5, 2, 3, 3}, {.padding = {2, 2}}},
      {"thin: 2x2, 7 channels", {2, 7, 9, 9}, {20, 7, 2, 2}, {}},
      // Small planes (conv2d_positions.cpp, f32 and f64 alike): VGG's 3x3 plane.
      {"VGG 3x3 plane", {16, 64, 3, 3}, {32, 64, 3, 3}, {.padding = {1, 1}}},
      // Winograd F(2x2, 3x3) (conv2d_winograd.cpp; f32 3x3 with 32+ channels in and out, any
      // CPU): odd output sizes (tiles past the edge), one sample, no padding, padding 2 on one
      // axis only, and 40 samples of 5x5 (blocks of whole samples, the last one short).
      {"Winograd: VGG 7x7, 72 outputs", {6, 64, 7, 7}, {72, 64, 3, 3}, {.padding = {1, 1}}},
      {"Winograd: one sample 8x8", {1, 64, 8, 8}, {64, 64, 3, 3}, {.padding = {1, 1}}},
      {"Winograd: valid 11x6 output", {3, 80, 13, 8}, {64, 80, 3, 3}, {}},
      {"Winograd: padding 2x0", {2, 64, 6, 9}, {64, 64, 3, 3}, {.padding = {2, 0}}},
      {"Winograd: 40 samples of 5x5", {40, 64, 5, 5}, {96, 64, 3, 3}, {.padding = {1, 1}}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    // f32 values, and the naive f64 loops on the same values as the reference.
    const Tensor x = randn(c.x), w = randn(c.w), b = randn({c.w[0]});
    const Tensor y = ops::conv2d(x, w, b, c.o);
    const Tensor g = randn(y.shape());
    const ops::Conv2dGrads r = ops::conv2d_backward(g, x, w, c.o, true, true, true);
    const auto d = [](const Tensor& t) { return t.to(DType::f64); };
    const NaiveGrads want = naive_conv2d_backward(d(g), d(x), d(w), c.o);
    const AbsSums abs = abs_sums(g, x, w, b, c.o);
    const TermCounts n = term_counts(c.x, c.w, y.shape(), c.o.groups);
    const double growth = winograd_growth(c.x, c.w, c.o);
    auto factor = [&](int64_t terms) {
      return growth * testing::sum_error_factor(terms, DType::f32);
    };
    CHECK(testing::max_bound_ratio(y, naive_conv2d(d(x), d(w), d(b), c.o), abs.output,
                                   factor(n.output)) <= 1);
    CHECK(testing::max_bound_ratio(r.grad_input, want.input, abs.input, factor(n.input)) <= 1);
    CHECK(testing::max_bound_ratio(r.grad_weight, want.weight, abs.weight, factor(n.weight)) <= 1);
    CHECK(testing::max_bound_ratio(r.grad_bias, ops::sum(d(g), {0, 2, 3}), abs.bias,
                                   factor(n.weight)) <= 1);
  }
}

TEST_CASE(
    "conv2d: 1x1 stride-2 layers (ResNet-18's and -50's downsampling) on the direct kernel stay "
    "inside their scratch, against f64",
    "[ops][conv]") {
  // A 1x1 stride-2 kernel reads phase (0, 0) of each channel's grids only, but every phase is
  // copied: the scratch must hold all of them (it held what the taps read, and the copy of the
  // last channel's other phases ran 176 floats past it for 128 channels at 16x16). The
  // allocator's poison mode puts guard bytes after every block and checks them when it is freed,
  // so a write past the end aborts here, whatever the allocator's rounding would have absorbed.
  const bool was = alloc_poison();
  set_alloc_poison(true);
  struct Case {
    Shape x, w;
  };
  for (const Case& c :
       {Case{{2, 128, 16, 16}, {256, 128, 1, 1}}, Case{{2, 64, 32, 32}, {128, 64, 1, 1}},
        Case{{3, 96, 15, 13}, {40, 96, 1, 1}}}) {
    INFO(c.x << " * " << c.w);
    const ops::Conv2dOptions o{.stride = {2, 2}};
    const Tensor x = randn(c.x), w = randn(c.w), b = randn({c.w[0]});
    const Tensor y = ops::conv2d(x, w, b, o);
    const auto d = [](const Tensor& t) { return t.to(DType::f64); };
    const AbsSums abs = abs_sums(randn(y.shape()), x, w, b, o);
    const TermCounts n = term_counts(c.x, c.w, y.shape(), o.groups);
    // Each output is a sum of C products and the bias, in f32: the bound of that many terms.
    CHECK(testing::max_bound_ratio(y, naive_conv2d(d(x), d(w), d(b), o), abs.output,
                                   testing::sum_error_factor(n.output, DType::f32)) <= 1);
  }
  set_alloc_poison(was);
}

TEST_CASE("conv2d: the Winograd F(2x2, 3x3) kernels called directly, against f64", "[ops][conv]") {
  // ops::conv2d takes them for f32 3x3 stride-1 layers with 32+ channels; called here directly
  // to check the forward without bias and each gradient alone, and 15 and 17 channels for the
  // vector loops' remainders (the kernels take any channel count). The reference: the naive f64
  // loops on the same f32 values, within sum_error_factor's bound times Winograd's growth 8.
  struct Case {
    const char* name;
    Shape x, w;
    std::array<int64_t, 2> pad;
  };
  const Case cases[] = {
      {"VGG 7x7, 72 outputs", {6, 64, 7, 7}, {72, 64, 3, 3}, {1, 1}},
      {"one sample 8x8", {1, 64, 8, 8}, {64, 64, 3, 3}, {1, 1}},
      {"valid 11x6 output", {3, 80, 13, 8}, {64, 80, 3, 3}, {0, 0}},
      {"padding 2x0", {2, 64, 6, 9}, {64, 64, 3, 3}, {2, 0}},
      {"40 samples of 5x5", {40, 64, 5, 5}, {96, 64, 3, 3}, {1, 1}},
      {"odd channel counts", {5, 15, 9, 10}, {17, 15, 3, 3}, {1, 1}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const ops::Conv2dOptions o{.padding = {c.pad[0], c.pad[1]}};
    const Tensor x32 = randn(c.x), w32 = randn(c.w), b32 = randn({c.w[0]});
    const auto d = [](const Tensor& t) { return t.to(DType::f64); };
    const Tensor y = naive_conv2d(d(x32), d(w32), d(b32), o);
    const Tensor y_nobias = naive_conv2d(d(x32), d(w32), Tensor(), o);
    const Tensor g32 = randn(y.shape());
    const NaiveGrads want = naive_conv2d_backward(d(g32), d(x32), d(w32), o);
    const AbsSums abs = abs_sums(g32, x32, w32, b32, o);
    const Tensor abs_nobias = naive_conv2d(abs64(x32), abs64(w32), Tensor(), o);
    const TermCounts n = term_counts(c.x, c.w, y.shape(), 1);
    auto factor = [](int64_t terms) { return 8 * testing::sum_error_factor(terms, DType::f32); };
    const ops::cpu::ConvGeometry geo{.N = c.x[0],
                                     .C = c.x[1],
                                     .H = c.x[2],
                                     .W = c.x[3],
                                     .K = c.w[0],
                                     .kh = 3,
                                     .kw = 3,
                                     .OH = y.size(2),
                                     .OW = y.size(3),
                                     .sh = 1,
                                     .sw = 1,
                                     .ph = c.pad[0],
                                     .pw = c.pad[1],
                                     .dh = 1,
                                     .dw = 1,
                                     .groups = 1};
    Tensor y32 = empty(y.shape()), y32_nobias = empty(y.shape());
    ops::cpu::winograd_conv_forward(geo, x32.data<float>(), w32.data<float>(), b32.data<float>(),
                                    y32.data<float>());
    ops::cpu::winograd_conv_forward(geo, x32.data<float>(), w32.data<float>(), nullptr,
                                    y32_nobias.data<float>());
    CHECK(testing::max_bound_ratio(y32, y, abs.output, factor(n.output)) <= 1);
    CHECK(testing::max_bound_ratio(y32_nobias, y_nobias, abs_nobias, factor(n.output)) <= 1);
    // Both gradients at once, then each alone (the other pointer null).
    Tensor gin = empty(c.x), gw = empty(c.w), gin_alone = empty(c.x), gw_alone = empty(c.w);
    ops::cpu::winograd_conv_backward(geo, g32.data<float>(), x32.data<float>(), w32.data<float>(),
                                     gin.data<float>(), gw.data<float>());
    ops::cpu::winograd_conv_backward(geo, g32.data<float>(), x32.data<float>(), w32.data<float>(),
                                     gin_alone.data<float>(), nullptr);
    ops::cpu::winograd_conv_backward(geo, g32.data<float>(), x32.data<float>(), w32.data<float>(),
                                     nullptr, gw_alone.data<float>());
    CHECK(testing::max_bound_ratio(gin, want.input, abs.input, factor(n.input)) <= 1);
    CHECK(testing::max_bound_ratio(gw, want.weight, abs.weight, factor(n.weight)) <= 1);
    // Exact: the two gradients share the transformed output gradient and otherwise run apart
    // (the same GEMM calls on the same chunks whichever is asked for).
    CHECK(gin_alone.to_vector<float>() == gin.to_vector<float>());
    CHECK(gw_alone.to_vector<float>() == gw.to_vector<float>());
  }
}

TEST_CASE("conv2d: non-contiguous operands and deterministic backward", "[ops][conv]") {
  // A channels-last buffer viewed as NCHW.
  Tensor x = randn({4, 9, 10, 6}).permute({0, 3, 1, 2});
  Tensor w = randn({8, 3, 3, 6}).permute({0, 3, 1, 2});
  CHECK_FALSE(x.is_contiguous());
  const ops::Conv2dOptions o{.stride = {1, 2}, .padding = {1, 1}};
  const double factor = testing::sum_error_factor(6 * 3 * 3, DType::f32);  // 6 channels, 3x3
  CHECK(testing::max_bound_ratio(ops::conv2d(x, w, Tensor(), o), naive_conv2d(x, w, Tensor(), o),
                                 naive_conv2d(abs64(x), abs64(w), Tensor(), o), factor) <= 1);
  Tensor g = randn({4, 8, 9, 5});
  // Exact: conv2d_backward makes its operands contiguous before the same kernels.
  ops::Conv2dGrads a = ops::conv2d_backward(g, x, w, o, true, true, true);
  ops::Conv2dGrads b =
      ops::conv2d_backward(g.contiguous(), x.contiguous(), w.contiguous(), o, true, true, true);
  CHECK(a.grad_weight.to_vector<float>() == b.grad_weight.to_vector<float>());
  CHECK(a.grad_input.to_vector<float>() == b.grad_input.to_vector<float>());
  CHECK(a.grad_bias.to_vector<float>() == b.grad_bias.to_vector<float>());
}

TEST_CASE("conv2d: output size", "[ops][conv]") {
  using A = std::array<int64_t, 2>;
  CHECK(ops::conv2d_output_size({28, 28}, {3, 3}, {.padding = {1, 1}}) == A{28, 28});
  CHECK(ops::conv2d_output_size({9, 8}, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}}) == A{5, 4});
  CHECK(ops::conv2d_output_size({10, 10}, {3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}) ==
        A{10, 10});
  CHECK_THROWS_WITH(ops::conv2d_output_size({2, 5}, {3, 3}, {}),
                    Catch::Contains("input size (2, 5)") && Catch::Contains("kernel (3, 3)") &&
                        Catch::Contains("padding (0, 0)") && Catch::Contains("stride (1, 1)") &&
                        Catch::Contains("dilation (1, 1)"));
}

TEST_CASE("conv2d: errors name the shapes and dtypes", "[ops][conv]") {
  Tensor x = randn({2, 4, 8, 8});
  CHECK_THROWS_WITH(ops::conv2d(randn({4, 8}), randn({3, 4, 3, 3}), Tensor()),
                    Catch::Contains("conv2d") && Catch::Contains("(N, C, H, W)") &&
                        Catch::Contains("(C, H, W)") && Catch::Contains("[4, 8]"));
  CHECK_THROWS_WITH(ops::conv2d(randn({1, 2, 4, 8, 8}), randn({3, 4, 3, 3}), Tensor()),
                    Catch::Contains("[1, 2, 4, 8, 8]"));
  CHECK_THROWS_WITH(ops::conv2d(x, randn({3, 4, 3}), Tensor()),
                    Catch::Contains("weight with 4 dims"));
  CHECK_THROWS_WITH(ops::conv2d(x, randn({3, 1, 3, 3}), Tensor(), {.groups = 3}),
                    Catch::Contains("divisible by groups=3") && Catch::Contains("[2, 4, 8, 8]"));
  CHECK_THROWS_WITH(ops::conv2d(x, randn({3, 3, 3, 3}), Tensor()),
                    Catch::Contains("[2, 4, 8, 8]") && Catch::Contains("[3, 3, 3, 3]"));
  CHECK_THROWS_WITH(ops::conv2d(x, randn({3, 4, 9, 3}), Tensor()),
                    Catch::Contains("input size (8, 8)") && Catch::Contains("kernel (9, 3)"));
  CHECK_THROWS_WITH(ops::conv2d(x, randn({3, 4, 3, 3}, {.dtype = DType::f64}), Tensor()),
                    Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THROWS_WITH(ops::conv2d(x, randn({3, 4, 3, 3}), randn({4})),
                    Catch::Contains("bias of shape [3]"));
  CHECK_THROWS_WITH(ops::conv2d(x, randn({3, 4, 3, 3}), Tensor(), {.stride = {0, 1}}),
                    Catch::Contains("stride >= 1"));
  CHECK_THROWS_WITH(
      ops::conv2d_backward(randn({2, 3, 5, 5}), x, randn({3, 4, 3, 3}), {}, true, true, true),
      Catch::Contains("grad_out of shape [2, 3, 6, 6]"));
}

TEST_CASE("conv2d: one sample (C, H, W) is a batch of one without the batch dim, as in torch",
          "[ops][conv]") {
  Generator gen(21);
  const Tensor x = randn({3, 7, 6}, {.dtype = DType::f64}, &gen);
  const Tensor w = randn({4, 3, 3, 3}, {.dtype = DType::f64}, &gen);
  const Tensor b = randn({4}, {.dtype = DType::f64}, &gen);
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 1}};
  const Tensor batched = ops::conv2d(x.unsqueeze(0), w, b, o);
  const Tensor single = ops::conv2d(x, w, b, o);
  REQUIRE(single.shape() == Shape{4, 4, 6});
  // Exact: a (C, H, W) input is unsqueezed to a batch of one and runs the same kernels.
  CHECK(single.to_vector<double>() == batched.squeeze(0).to_vector<double>());

  const Tensor gout = randn({4, 4, 6}, {.dtype = DType::f64}, &gen);
  const auto r1 = ops::conv2d_backward(gout, x, w, o, true, true, true);
  const auto rn = ops::conv2d_backward(gout.unsqueeze(0), x.unsqueeze(0), w, o, true, true, true);
  REQUIRE(r1.grad_input.shape() == x.shape());
  CHECK(r1.grad_input.to_vector<double>() == rn.grad_input.squeeze(0).to_vector<double>());
  CHECK(r1.grad_weight.to_vector<double>() == rn.grad_weight.to_vector<double>());
  CHECK(r1.grad_bias.to_vector<double>() == rn.grad_bias.to_vector<double>());
  CHECK_THROWS_WITH(ops::conv2d_backward(gout.unsqueeze(0), x, w, o, true, true, true),
                    Catch::Contains("grad_out with 3 dims") && Catch::Contains("[1, 4, 4, 6]"));

  // Differentiable, through every operand (gradcheck's defaults: torch's eps 1e-6, atol 1e-5, rtol
  // 1e-3).
  const auto check = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); },
      {x.clone().set_requires_grad(true), w.clone().set_requires_grad(true),
       b.clone().set_requires_grad(true)});
  INFO(check.worst);
  CHECK(check.ok);
}
