// CUDA normalize kernel (see normalize.h). One thread per pixel: it reads the pixel's C bytes
// (adjacent threads read adjacent pixels) and writes one element to each of the C planes
// (adjacent threads write adjacent elements of a plane, so the stores coalesce).
#include "cuda/kernels/normalize.h"

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

// Per-channel multiply-add coefficients, passed by value.
struct NormalizeCoeffs {
  float scale[kMaxNormalizeChannels];
  float bias[kMaxNormalizeChannels];
};

template <class T>
__global__ void __launch_bounds__(256)
    normalize_nhwc_to_nchw_kernel(const uint8_t* in, T* out, int64_t pixels, int64_t hw,
                                  int channels, NormalizeCoeffs k) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pixels;
       p += step) {
    const int64_t b = p / hw, s = p % hw;
    const uint8_t* px = in + p * channels;
    T* o = out + b * channels * hw + s;
    for (int c = 0; c < channels; ++c)
      o[c * hw] = ew::from_float<T>(static_cast<float>(px[c]) * k.scale[c] + k.bias[c]);
  }
}

}  // namespace

void normalize_u8_nhwc(const uint8_t* in, DType out_dtype, void* out, int64_t batch, int64_t height,
                       int64_t width, int64_t channels, const float* mean, const float* std,
                       cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::normalize_u8_nhwc");
  const char* op = "cuda::normalize_u8_nhwc";
  STOKE_CHECK(batch >= 0 && height >= 0 && width >= 0, op,
              "expected non-negative batch, height and width, got ", batch, ", ", height, ", ",
              width);
  STOKE_CHECK(channels >= 1 && channels <= kMaxNormalizeChannels, op, "expected 1 to ",
              kMaxNormalizeChannels, " channels, got ", channels);
  NormalizeCoeffs k{};
  for (int64_t c = 0; c < channels; ++c) {
    STOKE_CHECK(std[c] > 0.f, op, "expected std > 0 for every channel, got ", std[c],
                " for channel ", c);
    k.scale[c] = 1.f / (255.f * std[c]);
    k.bias[c] = -mean[c] / std[c];
  }
  const int64_t pixels = batch * height * width;
  ew::dispatch_floating(out_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (pixels == 0) return;
    auto* kern = &normalize_nhwc_to_nchw_kernel<T>;
    STOKE_LAUNCH(kern, ew::grid_for(pixels, 256), 256, 0, stream)
    (in, static_cast<T*>(out), pixels, height * width, static_cast<int>(channels), k);
    STOKE_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace stoke::cuda
