// im2col_kernel and col2im_kernel (cuda/kernels/conv2d_im2col.cu) in cuda/emu against naive loops:
// padding, stride, dilation, rectangular kernels, several samples with a sample stride larger
// than one group's image (the group slice of a grouped convolution), and sizes that are not
// multiples of the 256-thread block.
#include <catch2/catch.hpp>

#include <cmath>

#include <vector>

#include "core/random.h"
#include "cuda/kernels/conv2d_im2col.h"
#include "ops/creation.h"

namespace {

using namespace stoke;

struct Case {
  int64_t samples, channels, extra_channels, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
};

cuda::Im2colGeometry geometry(const Case& t) {
  cuda::Im2colGeometry g;
  g.samples = t.samples;
  g.channels = t.channels;
  g.sample_stride = (t.channels + t.extra_channels) * t.h * t.w;
  g.height = t.h;
  g.width = t.w;
  g.kernel_h = t.kh;
  g.kernel_w = t.kw;
  g.out_h = (t.h + 2 * t.ph - t.dh * (t.kh - 1) - 1) / t.sh + 1;
  g.out_w = (t.w + 2 * t.pw - t.dw * (t.kw - 1) - 1) / t.sw + 1;
  g.stride_h = t.sh;
  g.stride_w = t.sw;
  g.pad_h = t.ph;
  g.pad_w = t.pw;
  g.dilation_h = t.dh;
  g.dilation_w = t.dw;
  return g;
}

// The input position col entry (row, column) reads, or -1 in the padding.
int64_t source(const cuda::Im2colGeometry& g, int64_t row, int64_t column) {
  const int64_t j = row % g.kernel_w, i = (row / g.kernel_w) % g.kernel_h;
  const int64_t c = row / (g.kernel_w * g.kernel_h);
  const int64_t plane = g.out_h * g.out_w, n = column / plane, o = column % plane;
  const int64_t h = (o / g.out_w) * g.stride_h - g.pad_h + i * g.dilation_h;
  const int64_t w = (o % g.out_w) * g.stride_w - g.pad_w + j * g.dilation_w;
  if (h < 0 || h >= g.height || w < 0 || w >= g.width) return -1;
  return n * g.sample_stride + (c * g.height + h) * g.width + w;
}

}  // namespace

TEST_CASE("cuda kernels: im2col_kernel and col2im_kernel match naive loops", "[kernels][im2col]") {
  const std::vector<Case> cases = {
      {1, 1, 0, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1},  // 3x3 pad 1
      {3, 2, 0, 7, 6, 3, 2, 2, 1, 1, 0, 1, 1},  // stride 2x1, rectangular kernel
      {2, 3, 2, 9, 9, 3, 3, 1, 2, 2, 2, 2, 2},  // dilation 2, a group slice of 5 channels
      {4, 5, 0, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1},  // 1x1
      {2, 2, 1, 11, 13, 5, 5, 3, 2, 2, 1, 1, 1},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    const cuda::Im2colGeometry g = geometry(cases[k]);
    const int64_t x_elems = (g.samples - 1) * g.sample_stride + g.channels * g.height * g.width;
    Generator gen(k + 1);
    const Tensor x = randn({x_elems}, {}, &gen);
    Tensor col = full({g.rows() * g.cols()}, NAN);
    cuda::im2col(g, x.data<float>(), col.data<float>(), nullptr);
    const float* xp = x.data<float>();
    const float* cp = col.data<float>();
    std::vector<float> want_x(static_cast<size_t>(x_elems), 0.f);
    const Tensor c2 = randn({g.rows() * g.cols()}, {}, &gen);
    const float* c2p = c2.data<float>();
    int64_t bad = 0;
    for (int64_t r = 0; r < g.rows(); ++r)
      for (int64_t c = 0; c < g.cols(); ++c) {
        const int64_t s = source(g, r, c);
        const float want = s < 0 ? 0.f : xp[s];
        bad += cp[r * g.cols() + c] != want;
        if (s >= 0) want_x[static_cast<size_t>(s)] += c2p[r * g.cols() + c];
      }
    CHECK(bad == 0);  // im2col copies: bit for bit
    // col2im assigns every element of the samples' group slices and leaves the rest alone.
    Tensor back = full({x_elems}, 1234.f);
    cuda::col2im(g, c2p, back.data<float>(), nullptr);
    const float* bp = back.data<float>();
    double worst = 0;
    int64_t untouched_ok = 0, untouched = 0;
    for (int64_t i = 0; i < x_elems; ++i) {
      const int64_t in_sample = i % g.sample_stride;
      if (in_sample < g.channels * g.height * g.width) {
        worst = std::max(worst, std::abs(double(bp[i]) - double(want_x[static_cast<size_t>(i)])));
      } else {
        ++untouched;
        untouched_ok += bp[i] == 1234.f;
      }
    }
    // col2im sums each element's contributions (at most 5 x 5 patches here, randn values: random
    // signs) in another order than the loop above: within 6u sqrt(25 / 3 * 25) = 5.2e-6.
    CHECK(worst < 6 * 0x1p-24 * std::sqrt(25.0 / 3 * 25));
    CHECK(untouched_ok == untouched);
  }
  cuda::Im2colGeometry bad;
  bad.kernel_h = 0;
  CHECK_THROWS_WITH(cuda::im2col(bad, nullptr, nullptr, nullptr),
                    Catch::Contains("cuda::im2col") && Catch::Contains("kernel 0x1"));
}
