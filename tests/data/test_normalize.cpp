// normalize: u8 NHWC -> f32/f16 NCHW against the literal formula, per channel.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/tensor.h"
#include "data/normalize.h"

using namespace stoke;
using namespace stoke::data;
using Catch::Contains;

namespace {

Tensor make_u8(int64_t n, int64_t h, int64_t w, int64_t c) {
  Tensor t = empty({n, h, w, c}, {.dtype = DType::u8});
  uint8_t* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>((i * 31 + 7) % 256);
  return t;
}

// (x / 255 - mean[c]) / std[c] at (n, c, y, x), computed literally in double.
double reference(const Tensor& u8, int64_t n, int64_t ch, int64_t y, int64_t x,
                 const std::vector<float>& mean, const std::vector<float>& std) {
  const int64_t h = u8.size(1), w = u8.size(2), c = u8.size(3);
  const double v = u8.data<uint8_t>()[((n * h + y) * w + x) * c + ch];
  const double m = mean.size() == 1 ? mean[0] : mean[static_cast<size_t>(ch)];
  const double s = std.size() == 1 ? std[0] : std[static_cast<size_t>(ch)];
  return (v / 255.0 - m) / s;
}

}  // namespace

TEST_CASE("normalize: f32 and f16 NCHW equal the literal formula", "[data][normalize]") {
  struct Case {
    int64_t n, h, w, c;
    std::vector<float> mean, std;
  };
  // C = 1 and 3 take specialized loops, 4 the generic one; 1100 columns cross the f16 buffer.
  const std::vector<Case> cases = {{5, 28, 28, 1, {0.286f}, {0.353f}},
                                   {3, 9, 11, 3, {0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f}},
                                   {2, 5, 7, 4, {0.5f}, {0.5f}},
                                   {1, 2, 1100, 1, {0.1f}, {2.f}}};
  for (const Case& k : cases) {
    INFO("shape " << k.n << "x" << k.h << "x" << k.w << "x" << k.c);
    const Tensor in = make_u8(k.n, k.h, k.w, k.c);
    const Tensor f32 = normalize(in, {.mean = k.mean, .std = k.std});
    const Tensor f16 = normalize(in, {.mean = k.mean, .std = k.std, .dtype = DType::f16});
    REQUIRE(f32.shape() == Shape({k.n, k.c, k.h, k.w}));
    REQUIRE(f16.dtype() == DType::f16);
    const float* a = f32.data<float>();
    const Half* b = f16.data<Half>();
    int64_t i = 0;
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t ch = 0; ch < k.c; ++ch)
        for (int64_t y = 0; y < k.h; ++y)
          for (int64_t x = 0; x < k.w; ++x, ++i) {
            const double want = reference(in, n, ch, y, x, k.mean, k.std);
            REQUIRE(std::abs(a[i] - want) <= 1e-6 * (1 + std::abs(want)));
            // f16 is the f32 result rounded to nearest even.
            REQUIRE(b[i].bits == Half(a[i]).bits);
          }
  }
}

TEST_CASE("normalize: into a reused buffer, and errors name what is wrong", "[data][normalize]") {
  const Tensor in = make_u8(2, 3, 3, 1);
  Tensor out = empty({2, 1, 3, 3});
  normalize_into(in, out, {.mean = {0.5f}, .std = {0.25f}});
  CHECK(out.data<float>()[4] == Approx(reference(in, 0, 0, 1, 1, {0.5f}, {0.25f})).margin(1e-6));
  CHECK_THROWS_WITH(normalize(in.to(DType::f32)), Contains("normalize") && Contains("u8"));
  CHECK_THROWS_WITH(normalize(in, {.mean = {0.1f, 0.2f}}),
                    Contains("1 or 1 mean values") && Contains("got 2"));
  CHECK_THROWS_WITH(normalize(in, {.std = {0.f}}), Contains("std != 0"));
  CHECK_THROWS_WITH(normalize(in, {.dtype = DType::f64}), Contains("f32 or f16"));
  Tensor wrong = empty({2, 3, 3, 1});
  CHECK_THROWS_WITH(normalize_into(in, wrong), Contains("[2, 1, 3, 3]"));
}
