// The CPU kernel of normalize_u8_nhwc (ops/normalize.h): one fused pass over the thread pool, an
// output row (n, c, y) at a time, f16 output through a float row buffer and F16C conversions.
#include <algorithm>
#include <array>
#include <cstring>

#include "core/half.h"
#include "core/parallel.h"
#include "ops/cpu/backend.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace stoke::ops::cpu {
namespace {

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

// The entry point has checked the tensors (contiguous u8 NHWC in, contiguous f32/f16 NCHW out, not
// empty) and expanded mean and std to one non-zero value per channel.
void CpuBackend::normalize_u8_nhwc(const Tensor& images, const Tensor& out,
                                   const std::vector<float>& mean, const std::vector<float>& std) {
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  std::vector<float> scale(static_cast<size_t>(c)), bias(static_cast<size_t>(c));
  for (size_t ch = 0; ch < static_cast<size_t>(c); ++ch) {
    scale[ch] = 1.f / (255.f * std[ch]);
    bias[ch] = -mean[ch] / std[ch];
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

}  // namespace stoke::ops::cpu
