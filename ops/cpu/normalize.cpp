// The CPU kernels of normalize_u8_nhwc and crop_flip_normalize_u8_nhwc (ops/normalize.h): one
// fused pass over the thread pool, an output row (n, c, y) at a time, f16/bf16 output through a
// float row buffer and one conversion pass (F16C for f16).
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

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
  for (; i < n; ++i) out[i] = ::stoke::detail::float_to_half_bits(in[i]);
}

// Converts n floats to bfloat16 bits, round to nearest even (as core/half.h).
inline void floats_to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ::stoke::detail::float_to_bf16_bits(in[i]);
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
void run(const uint8_t* in, void* out, DType dt, int64_t n, int64_t c, int64_t h, int64_t w,
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
      if (dt == DType::f32) {
        row_f32<kC>(src, static_cast<float*>(out) + r * w, w, c, scale[ch], bias[ch]);
        continue;
      }
      uint16_t* dst = static_cast<uint16_t*>(out) + r * w;
      for (int64_t x0 = 0; x0 < w; x0 += static_cast<int64_t>(buf.size())) {
        const int64_t len = std::min<int64_t>(w - x0, static_cast<int64_t>(buf.size()));
        row_f32<kC>(src + x0 * c, buf.data(), len, c, scale[ch], bias[ch]);
        if (dt == DType::f16)
          floats_to_half(buf.data(), dst + x0, len);
        else
          floats_to_bf16(buf.data(), dst + x0, len);
      }
    }
  });
}

// dst[x] = src[(kFlip ? -x : x) * stride] * scale + bias for x in [0, n): C is a template argument
// for the common 1 and 3 and the direction one, so that the loop has a constant stride the compiler
// vectorizes (a reversed one included).
template <int64_t kC, bool kFlip>
inline void crop_flip_span(const uint8_t* src, float* dst, int64_t n, int64_t c, float scale,
                           float bias) {
  const int64_t stride = (kC > 0 ? kC : c) * (kFlip ? -1 : 1);
  for (int64_t x = 0; x < n; ++x) dst[x] = static_cast<float>(src[x * stride]) * scale + bias;
}

// One output row of crop_flip: dst[x] = normalized pixel (sy, left + (flip ? ow - 1 - x : x)),
// the columns outside [0, w) the zero padding (= bias). src_row is row sy of channel ch (stride c)
// or null when the row is outside the image.
template <int64_t kC>
void crop_flip_row(const uint8_t* src_row, float* dst, int64_t ow, int64_t w, int64_t c,
                   int64_t left, bool flip, float scale, float bias) {
  if (!src_row) {
    std::fill(dst, dst + ow, bias);
    return;
  }
  // Output columns [x0, x1) read inside the image: for x there, the source column is
  // left + x (or left + ow - 1 - x), which lies in [0, w).
  const int64_t base = flip ? left + ow - 1 : left;  // source column of x = 0
  int64_t x0, x1;
  if (!flip) {
    x0 = std::clamp<int64_t>(-left, 0, ow);
    x1 = std::clamp<int64_t>(w - left, x0, ow);
  } else {
    x0 = std::clamp<int64_t>(base - (w - 1), 0, ow);
    x1 = std::clamp<int64_t>(base + 1, x0, ow);
  }
  std::fill(dst, dst + x0, bias);
  const uint8_t* s = src_row + (flip ? base - x0 : base + x0) * c;
  if (flip)
    crop_flip_span<kC, true>(s, dst + x0, x1 - x0, c, scale, bias);
  else
    crop_flip_span<kC, false>(s, dst + x0, x1 - x0, c, scale, bias);
  std::fill(dst + x1, dst + ow, bias);
}

template <int64_t kC>
void crop_flip_rows(const uint8_t* in, const int32_t* k, void* o, DType dt, int64_t n, int64_t c,
                    int64_t h, int64_t w, int64_t oh, int64_t ow, const float* scale,
                    const float* bias) {
  const int64_t rows = n * c * oh;  // output rows (n, ch, y)
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(ow * c, 1));
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    std::array<float, 1024> buf;
    std::vector<float> wide;  // rows longer than buf (rare): one allocation per chunk
    float* row = buf.data();
    if (ow > static_cast<int64_t>(buf.size())) {
      wide.resize(static_cast<size_t>(ow));
      row = wide.data();
    }
    for (int64_t r = b; r < e; ++r) {
      const int64_t y = r % oh, ch = (r / oh) % c, img = r / (oh * c);
      const int64_t top = k[3 * img], left = k[3 * img + 1];
      const bool flip = k[3 * img + 2] != 0;
      const int64_t sy = top + y;
      const uint8_t* src_row = sy >= 0 && sy < h ? in + ((img * h + sy) * w) * c + ch : nullptr;
      float* dst = dt == DType::f32 ? static_cast<float*>(o) + r * ow : row;
      crop_flip_row<kC>(src_row, dst, ow, w, c, left, flip, scale[ch], bias[ch]);
      if (dt == DType::f16)
        floats_to_half(row, static_cast<uint16_t*>(o) + r * ow, ow);
      else if (dt == DType::bf16)
        floats_to_bf16(row, static_cast<uint16_t*>(o) + r * ow, ow);
    }
  });
}

// The kernels above write NCHW rows: a channels_last `out` gets them through an NCHW buffer and
// one copy (the cuda kernels write NHWC themselves).
template <class Run>
void in_nchw(const Tensor& out, Run run) {
  if (out.is_contiguous()) return run(out);
  const Tensor nchw = empty(out.shape(), {.dtype = out.dtype()});
  run(nchw);
  Tensor(out).copy_(nchw);
}

// normalize_u8_nhwc into a contiguous NCHW out.
void normalize_nchw(const Tensor& images, const Tensor& out, const std::vector<float>& mean,
                    const std::vector<float>& std) {
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  std::vector<float> scale(static_cast<size_t>(c)), bias(static_cast<size_t>(c));
  for (size_t ch = 0; ch < static_cast<size_t>(c); ++ch) {
    scale[ch] = 1.f / (255.f * std[ch]);
    bias[ch] = -mean[ch] / std[ch];
  }
  const auto* in = images.data<uint8_t>();
  void* o = out.data_ptr();
  const DType dt = out.dtype();
  if (c == 1) {
    run<1>(in, o, dt, n, c, h, w, scale.data(), bias.data());
  } else if (c == 3) {
    run<3>(in, o, dt, n, c, h, w, scale.data(), bias.data());
  } else {
    run<0>(in, o, dt, n, c, h, w, scale.data(), bias.data());
  }
}

// crop_flip_normalize_u8_nhwc into a contiguous (N, C, OH, OW) out.
void crop_flip_normalize_nchw(const Tensor& images, const Tensor& out, const Tensor& crops,
                              const std::vector<float>& mean, const std::vector<float>& std) {
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  const int64_t oh = out.size(2), ow = out.size(3);
  std::vector<float> scale(static_cast<size_t>(c)), bias(static_cast<size_t>(c));
  for (size_t ch = 0; ch < static_cast<size_t>(c); ++ch) {
    scale[ch] = 1.f / (255.f * std[ch]);
    bias[ch] = -mean[ch] / std[ch];
  }
  const uint8_t* in = images.data<uint8_t>();
  const int32_t* k = crops.data<int32_t>();
  void* o = out.data_ptr();
  const DType dt = out.dtype();
  if (c == 1)
    crop_flip_rows<1>(in, k, o, dt, n, c, h, w, oh, ow, scale.data(), bias.data());
  else if (c == 3)
    crop_flip_rows<3>(in, k, o, dt, n, c, h, w, oh, ow, scale.data(), bias.data());
  else
    crop_flip_rows<0>(in, k, o, dt, n, c, h, w, oh, ow, scale.data(), bias.data());
}

}  // namespace

// The entry point has checked the tensors (contiguous u8 NHWC in, an f32/f16/bf16 NCHW out,
// contiguous or channels_last, not empty) and expanded mean and std to one non-zero value per
// channel.
void CpuBackend::normalize_u8_nhwc(const Tensor& images, const Tensor& out_any,
                                   const std::vector<float>& mean, const std::vector<float>& std) {
  in_nchw(out_any, [&](const Tensor& out) { normalize_nchw(images, out, mean, std); });
}

void CpuBackend::crop_flip_normalize_u8_nhwc(const Tensor& images, const Tensor& out_any,
                                             const Tensor& crops, const std::vector<float>& mean,
                                             const std::vector<float>& std) {
  in_nchw(out_any,
          [&](const Tensor& out) { crop_flip_normalize_nchw(images, out, crops, mean, std); });
}

}  // namespace stoke::ops::cpu
