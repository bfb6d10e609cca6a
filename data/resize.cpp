#include "data/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace stoke::data {
namespace {

// One output coordinate's two source taps and the weight of the second.
struct Tap {
  int64_t i0, i1;
  float w1;
};

// Half-pixel-center mapping of output index o (in a size-`resized` axis) to the source axis of
// size `n`: x = (o + 0.5) * n / resized - 0.5, clamped at the borders.
void make_taps(int64_t n, int64_t resized, int64_t start, int64_t count, std::vector<Tap>& taps) {
  taps.resize(static_cast<size_t>(count));
  const double scale = static_cast<double>(n) / static_cast<double>(resized);
  for (int64_t o = 0; o < count; ++o) {
    double x = (static_cast<double>(o + start) + 0.5) * scale - 0.5;
    x = std::clamp(x, 0.0, static_cast<double>(n - 1));
    const int64_t i0 = static_cast<int64_t>(x);
    const int64_t i1 = std::min(i0 + 1, n - 1);
    taps[static_cast<size_t>(o)] = {i0, i1, static_cast<float>(x - static_cast<double>(i0))};
  }
}

}  // namespace

void resize_window(const uint8_t* src, int64_t h, int64_t w, int64_t c, int64_t rh, int64_t rw,
                   int64_t top, int64_t left, int64_t out_h, int64_t out_w, uint8_t* dst) {
  STOKE_CHECK(h > 0 && w > 0 && c > 0 && rh > 0 && rw > 0 && top >= 0 && left >= 0 &&
                  top + out_h <= rh && left + out_w <= rw,
              "resize_window", "bad geometry: source ", h, "x", w, "x", c, ", resized ", rh, "x",
              rw, ", window ", out_h, "x", out_w, " at (", top, ", ", left, ")");
  if (rh == h && rw == w) {  // a pure crop: exact bytes
    for (int64_t y = 0; y < out_h; ++y)
      std::memcpy(dst + y * out_w * c, src + ((y + top) * w + left) * c,
                  static_cast<size_t>(out_w * c));
    return;
  }
  // Taps are computed once per call (per image), never per pixel.
  thread_local std::vector<Tap> ys, xs;
  make_taps(h, rh, top, out_h, ys);
  make_taps(w, rw, left, out_w, xs);
  for (int64_t y = 0; y < out_h; ++y) {
    const Tap ty = ys[static_cast<size_t>(y)];
    const uint8_t* r0 = src + ty.i0 * w * c;
    const uint8_t* r1 = src + ty.i1 * w * c;
    uint8_t* d = dst + y * out_w * c;
    for (int64_t x = 0; x < out_w; ++x) {
      const Tap tx = xs[static_cast<size_t>(x)];
      for (int64_t k = 0; k < c; ++k) {
        const float a = r0[tx.i0 * c + k] + tx.w1 * (r0[tx.i1 * c + k] - r0[tx.i0 * c + k]);
        const float b = r1[tx.i0 * c + k] + tx.w1 * (r1[tx.i1 * c + k] - r1[tx.i0 * c + k]);
        const float v = a + ty.w1 * (b - a);
        d[x * c + k] = static_cast<uint8_t>(std::clamp(v + 0.5f, 0.f, 255.f));
      }
    }
  }
}

void fit_image(const uint8_t* src, int64_t h, int64_t w, int64_t c, int64_t out_h, int64_t out_w,
               Fit fit, std::vector<uint8_t>& dst) {
  dst.resize(static_cast<size_t>(out_h * out_w * c));
  switch (fit) {
    case Fit::exact:
      STOKE_CHECK(h == out_h && w == out_w, "fit_image", "expected a ", out_h, "x", out_w,
                  " image (no resize or crop requested), got ", h, "x", w);
      std::memcpy(dst.data(), src, dst.size());
      return;
    case Fit::stretch:
      resize_window(src, h, w, c, out_h, out_w, 0, 0, out_h, out_w, dst.data());
      return;
    case Fit::crop:
      STOKE_CHECK(h >= out_h && w >= out_w, "fit_image", "center crop to ", out_h, "x", out_w,
                  " needs an image at least that big, got ", h, "x", w);
      resize_window(src, h, w, c, h, w, (h - out_h) / 2, (w - out_w) / 2, out_h, out_w, dst.data());
      return;
    case Fit::resize_crop: {
      // Scale the limiting side to the target, the other in proportion (truncated, as
      // torchvision's Resize(int) does), never below the target.
      int64_t rh = out_h, rw = out_w;
      if (h * out_w <= w * out_h) {  // h / out_h <= w / out_w: height limits
        rw = std::max(out_w, w * out_h / h);
      } else {
        rh = std::max(out_h, h * out_w / w);
      }
      resize_window(src, h, w, c, rh, rw, (rh - out_h) / 2, (rw - out_w) / 2, out_h, out_w,
                    dst.data());
      return;
    }
  }
}

}  // namespace stoke::data
