// CUDA normalize kernels (see normalize.h). One thread per output pixel: it reads the pixel's C
// bytes (adjacent threads read adjacent pixels, in reverse order when flipped) and writes one
// element to each of the C planes (adjacent threads write adjacent elements of a plane, so the
// stores coalesce). The channels-last instances write the pixel's C values side by side instead
// (NHWC out: the same values, the same operations).
#include "cuda/kernels/normalize.h"

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

// Per-channel multiply-add coefficients, passed by value.
struct NormalizeCoeffs {
  float scale[kMaxNormalizeChannels];
  float bias[kMaxNormalizeChannels];
};

// Where output pixel p = (b, s) of an image of hw pixels starts, and the distance between its
// channels: (b, c, s) in NCHW, (b, s, c) in channels-last memory (kCL).
template <bool kCL>
__device__ __forceinline__ int64_t pixel_offset(int64_t p, int64_t hw, int channels) {
  return kCL ? p * channels : (p / hw) * channels * hw + p % hw;
}
template <bool kCL>
__device__ __forceinline__ int64_t channel_stride(int64_t hw) {
  return kCL ? 1 : hw;
}

template <class T, bool kCL>
__global__ void __launch_bounds__(256)
    normalize_nhwc_to_nchw_kernel(const uint8_t* in, T* out, int64_t pixels, int64_t hw,
                                  int channels, NormalizeCoeffs k) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t cs = channel_stride<kCL>(hw);
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pixels;
       p += step) {
    const uint8_t* px = in + p * channels;
    T* o = out + pixel_offset<kCL>(p, hw, channels);
    for (int c = 0; c < channels; ++c)
      o[c * cs] = ew::from_float<T>(static_cast<float>(px[c]) * k.scale[c] + k.bias[c]);
  }
}

// Output pixel p = (b, y, x) of (batch, out_h, out_w): its source pixel under image b's crop.
template <class T, bool kCL>
__global__ void __launch_bounds__(256)
    crop_flip_normalize_kernel(const uint8_t* in, const int32_t* crops, T* out, int64_t pixels,
                               int64_t height, int64_t width, int64_t out_h, int64_t out_w,
                               int channels, NormalizeCoeffs k) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t ohw = out_h * out_w;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pixels;
       p += step) {
    const int64_t b = p / ohw, s = p % ohw, y = s / out_w, x = s % out_w;
    const int32_t* crop = crops + 3 * b;
    const int64_t sy = crop[0] + y, sx = crop[1] + (crop[2] != 0 ? out_w - 1 - x : x);
    const bool inside = sy >= 0 && sy < height && sx >= 0 && sx < width;
    const uint8_t* px = inside ? in + ((b * height + sy) * width + sx) * channels : in;
    T* o = out + pixel_offset<kCL>(p, ohw, channels);
    const int64_t cs = channel_stride<kCL>(ohw);
    for (int c = 0; c < channels; ++c) {
      const float v = inside ? static_cast<float>(px[c]) : 0.f;
      o[c * cs] = ew::from_float<T>(v * k.scale[c] + k.bias[c]);
    }
  }
}

// The multiply-add coefficients of mean and std (checked: std > 0, at most 16 channels).
NormalizeCoeffs coefficients(const char* op, int64_t channels, const float* mean,
                             const float* std) {
  STOKE_CHECK(channels >= 1 && channels <= kMaxNormalizeChannels, op, "expected 1 to ",
              kMaxNormalizeChannels, " channels, got ", channels);
  NormalizeCoeffs k{};
  for (int64_t c = 0; c < channels; ++c) {
    STOKE_CHECK(std[c] > 0.f, op, "expected std > 0 for every channel, got ", std[c],
                " for channel ", c);
    k.scale[c] = 1.f / (255.f * std[c]);
    k.bias[c] = -mean[c] / std[c];
  }
  return k;
}

}  // namespace

void normalize_u8_nhwc(const uint8_t* in, DType out_dtype, void* out, int64_t batch, int64_t height,
                       int64_t width, int64_t channels, const float* mean, const float* std,
                       cudaStream_t stream, bool channels_last) {
  STOKE_NVTX_RANGE("stoke::cuda::normalize_u8_nhwc");
  const char* op = "cuda::normalize_u8_nhwc";
  STOKE_CHECK(batch >= 0 && height >= 0 && width >= 0, op,
              "expected non-negative batch, height and width, got ", batch, ", ", height, ", ",
              width);
  const NormalizeCoeffs k = coefficients(op, channels, mean, std);
  const int64_t pixels = batch * height * width;
  ew::dispatch_floating(out_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (pixels == 0) return;
    auto* kern = channels_last ? &normalize_nhwc_to_nchw_kernel<T, true>
                               : &normalize_nhwc_to_nchw_kernel<T, false>;
    STOKE_LAUNCH(kern, ew::grid_for(pixels, 256), 256, 0, stream)
    (in, static_cast<T*>(out), pixels, height * width, static_cast<int>(channels), k);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

void crop_flip_normalize_u8_nhwc(const uint8_t* in, const int32_t* crops, DType out_dtype,
                                 void* out, int64_t batch, int64_t height, int64_t width,
                                 int64_t channels, int64_t out_h, int64_t out_w, const float* mean,
                                 const float* std, cudaStream_t stream, bool channels_last) {
  STOKE_NVTX_RANGE("stoke::cuda::crop_flip_normalize_u8_nhwc");
  const char* op = "cuda::crop_flip_normalize_u8_nhwc";
  STOKE_CHECK(batch >= 0 && height >= 0 && width >= 0 && out_h >= 0 && out_w >= 0, op,
              "expected non-negative sizes, got batch ", batch, ", image ", height, "x", width,
              ", output ", out_h, "x", out_w);
  const NormalizeCoeffs k = coefficients(op, channels, mean, std);
  const int64_t pixels = batch * out_h * out_w;
  ew::dispatch_floating(out_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (pixels == 0) return;
    auto* kern = channels_last ? &crop_flip_normalize_kernel<T, true>
                               : &crop_flip_normalize_kernel<T, false>;
    STOKE_LAUNCH(kern, ew::grid_for(pixels, 256), 256, 0, stream)
    (in, crops, static_cast<T*>(out), pixels, height, width, out_h, out_w,
     static_cast<int>(channels), k);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace stoke::cuda
