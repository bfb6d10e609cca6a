#include "data/normalize.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "ops/check.h"
#include "ops/backend.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace stoke::data {

namespace {

constexpr const char* kOp = "normalize";

// Converts n floats to binary16 bits, round to nearest even (F16C when the target has it).
inline void floats_to_half(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = detail::float_to_half_bits(in[i]);
}

// One output row of one channel: dst[x] = src[x * C + ch] * scale + bias. C is a template
// argument for the common 1 and 3 so that the strided load is a constant stride the compiler
// vectorizes.
template <int64_t kC>
inline void row_f32(const uint8_t* src, float* dst, int64_t w, int64_t c, float scale, float bias) {
  const int64_t stride = kC > 0 ? kC : c;
  for (int64_t x = 0; x < w; ++x) dst[x] = static_cast<float>(src[x * stride]) * scale + bias;
}

template <int64_t kC>
void run(const uint8_t* in, void* out, bool half, int64_t n, int64_t c, int64_t h, int64_t w,
         const float* scale, const float* bias) {
  const int64_t rows = n * c * h;  // output rows (n, ch, y)
  // Rows per chunk: ~16 KiB of input per chunk outweighs the pool's dispatch cost.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(w * c, 1));
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    // Half output goes through a float row buffer on the stack, then one vector conversion.
    std::array<float, 1024> buf;
    for (int64_t r = b; r < e; ++r) {
      const int64_t y = r % h, ch = (r / h) % c, img = r / (h * c);
      const uint8_t* src = in + ((img * h + y) * w) * c + ch;
      if (!half) {
        row_f32<kC>(src, static_cast<float*>(out) + r * w, w, c, scale[ch], bias[ch]);
        continue;
      }
      uint16_t* dst = static_cast<uint16_t*>(out) + r * w;
      for (int64_t x0 = 0; x0 < w; x0 += static_cast<int64_t>(buf.size())) {
        const int64_t len = std::min<int64_t>(w - x0, static_cast<int64_t>(buf.size()));
        row_f32<kC>(src + x0 * c, buf.data(), len, c, scale[ch], bias[ch]);
        floats_to_half(buf.data(), dst + x0, len);
      }
    }
  });
}

}  // namespace

void normalize_into(const Tensor& images, const Tensor& out, const NormalizeOptions& options) {
  STOKE_CHECK(images.defined() && out.defined(), kOp, "expected defined tensors");
  STOKE_CHECK(images.device() == out.device(), kOp,
              "expected images and out on the same device, got images on ", images.device(),
              " and out on ", out.device());
  STOKE_CHECK(images.dtype() == DType::u8, kOp, "expected u8 images, got ", images.dtype());
  STOKE_CHECK(images.dim() == 4, kOp, "expected images of shape (N, H, W, C), got ",
              images.shape());
  STOKE_CHECK(images.is_contiguous(), kOp, "expected contiguous images");
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  STOKE_CHECK(out.dtype() == DType::f32 || out.dtype() == DType::f16, kOp,
              "expected an f32 or f16 output, got ", out.dtype());
  STOKE_CHECK(out.shape() == Shape({n, c, h, w}) && out.is_contiguous(), kOp,
              "expected a contiguous output of shape ", Shape({n, c, h, w}), ", got ", out.shape());
  const auto per_channel = [&](const std::vector<float>& v, const char* what) {
    STOKE_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == c, kOp, "expected 1 or ", c, " ",
                what, " values (one per channel), got ", v.size());
  };
  per_channel(options.mean, "mean");
  per_channel(options.std, "std");
  std::vector<float> scale(static_cast<size_t>(c)), bias(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    const float m = options.mean[options.mean.size() == 1 ? 0 : static_cast<size_t>(ch)];
    const float s = options.std[options.std.size() == 1 ? 0 : static_cast<size_t>(ch)];
    STOKE_CHECK(s != 0.f, kOp, "expected std != 0, got 0 for channel ", ch);
    scale[static_cast<size_t>(ch)] = 1.f / (255.f * s);
    bias[static_cast<size_t>(ch)] = -m / s;
  }
  if (n == 0 || h == 0 || w == 0 || c == 0) return;
  if (auto* k = ops::device_dispatch(kOp, {&images, &out})) {
    // The device kernel takes mean/std per channel (it folds them into scale and bias itself).
    std::vector<float> mean(static_cast<size_t>(c)), std(static_cast<size_t>(c));
    for (size_t ch = 0; ch < static_cast<size_t>(c); ++ch) {
      mean[ch] = options.mean[options.mean.size() == 1 ? 0 : ch];
      std[ch] = options.std[options.std.size() == 1 ? 0 : ch];
    }
    k->normalize_u8_nhwc(images, out, mean, std);
    return;
  }
  const auto* in = images.data<uint8_t>();
  void* o = out.data_ptr();
  const bool half = out.dtype() == DType::f16;
  if (c == 1) {
    run<1>(in, o, half, n, c, h, w, scale.data(), bias.data());
  } else if (c == 3) {
    run<3>(in, o, half, n, c, h, w, scale.data(), bias.data());
  } else {
    run<0>(in, o, half, n, c, h, w, scale.data(), bias.data());
  }
}

Tensor normalize(const Tensor& images, const NormalizeOptions& options) {
  STOKE_CHECK(images.defined() && images.dim() == 4, kOp,
              "expected images of shape (N, H, W, C), got ",
              images.defined() ? images.shape() : Shape{});
  STOKE_CHECK(options.dtype == DType::f32 || options.dtype == DType::f16, kOp,
              "expected dtype f32 or f16, got ", options.dtype);
  Tensor out = empty({images.size(0), images.size(3), images.size(1), images.size(2)},
                     {.dtype = options.dtype, .device = images.device()});
  normalize_into(images, out, options);
  return out;
}

}  // namespace stoke::data
