// CUDA input normalization for the data loader: a batch of u8 NHWC images becomes NCHW f32, f16
// or bf16 with per-channel mean/std, in one fused kernel (the batch crosses the bus as bytes);
// and the same kernel with a per-image random crop (zero padding) and horizontal flip folded in,
// so that augmentation happens on the device, not on the loader's CPU workers.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// The most channels normalize_u8_nhwc accepts (their coefficients travel in the launch).
constexpr int kMaxNormalizeChannels = 16;

// out[b, c, y, x] = (in[b, y, x, c] / 255 - mean[c]) / std[c], computed as one multiply-add
// x * (1 / (255 std[c])) - mean[c] / std[c] (as data/'s CPU batcher does), stored as out_dtype
// (f32, f16 or bf16, rounded to nearest even). mean and std are host arrays of `channels` values
// (mean/std in [0, 1] units, std > 0). in and out are contiguous; with channels_last, out is
// (batch, height, width, channels) memory instead (a channels_last NCHW tensor's NHWC storage).
void normalize_u8_nhwc(const uint8_t* in, DType out_dtype, void* out, int64_t batch, int64_t height,
                       int64_t width, int64_t channels, const float* mean, const float* std,
                       cudaStream_t stream, bool channels_last = false);

// out[b, c, y, x] = normalize(in[b, sy, sx, c]) with sy = crops[b][0] + y and
// sx = crops[b][1] + (crops[b][2] ? out_w - 1 - x : x), and 0 for a pixel outside (height, width)
// (zero padding, normalized like any pixel). crops: device array of batch (top, left, flip) i32
// triples; out: (batch, channels, out_h, out_w) of out_dtype. The rest as normalize_u8_nhwc.
void crop_flip_normalize_u8_nhwc(const uint8_t* in, const int32_t* crops, DType out_dtype,
                                 void* out, int64_t batch, int64_t height, int64_t width,
                                 int64_t channels, int64_t out_h, int64_t out_w, const float* mean,
                                 const float* std, cudaStream_t stream, bool channels_last = false);

}  // namespace stoke::cuda
