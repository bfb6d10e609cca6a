// CUDA input normalization for the data loader: a batch of u8 NHWC images becomes NCHW f32, f16
// or bf16 with per-channel mean/std, in one fused kernel (the batch crosses the bus as bytes).
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
// (mean/std in [0, 1] units, std > 0). in and out are contiguous.
void normalize_u8_nhwc(const uint8_t* in, DType out_dtype, void* out, int64_t batch, int64_t height,
                       int64_t width, int64_t channels, const float* mean, const float* std,
                       cudaStream_t stream);

}  // namespace stoke::cuda
