// Group and layer norm on the GPU with the semantics of ops/group_norm.h (PyTorch's): the
// contiguous input is viewed as (N, G, K, S); statistics (mean, biased variance) per row (n, g)
// of K * S values; weight / bias index (g, k). The input is f32, f16 or bf16; weight, bias, the
// saved statistics and the weight / bias gradients are f32. All math is f32.
#pragma once

#include <cstdint>

#include "cuda/compat.h"

namespace stoke::cuda {

// (N, G, K, S): group_norm is (N, G, C / G, prod(spatial)), layer_norm (rows, 1, D, 1).
struct GroupNormLayout {
  int64_t batch = 0, groups = 1, channels_per_group = 1, spatial = 1;
};

// y = (x - mean) * rstd * weight + bias per row; save_mean / save_rstd (N * G floats, required)
// receive the statistics. weight / bias (G * K floats) may be null (1 and 0).
void group_norm_forward(const GroupNormLayout& l, const float* x, float* y, const float* weight,
                        const float* bias, float eps, float* save_mean, float* save_rstd,
                        cudaStream_t stream);
void group_norm_forward(const GroupNormLayout& l, const __half* x, __half* y, const float* weight,
                        const float* bias, float eps, float* save_mean, float* save_rstd,
                        cudaStream_t stream);
void group_norm_forward(const GroupNormLayout& l, const __nv_bfloat16* x, __nv_bfloat16* y,
                        const float* weight, const float* bias, float eps, float* save_mean,
                        float* save_rstd, cudaStream_t stream);

// Backward from the forward's save_mean / save_rstd. Any of grad_x, grad_weight, grad_bias may
// be null (not computed); weight may be null (1).
void group_norm_backward(const GroupNormLayout& l, const float* grad_y, const float* x,
                         const float* weight, const float* save_mean, const float* save_rstd,
                         float* grad_x, float* grad_weight, float* grad_bias, cudaStream_t stream);
void group_norm_backward(const GroupNormLayout& l, const __half* grad_y, const __half* x,
                         const float* weight, const float* save_mean, const float* save_rstd,
                         __half* grad_x, float* grad_weight, float* grad_bias, cudaStream_t stream);
void group_norm_backward(const GroupNormLayout& l, const __nv_bfloat16* grad_y,
                         const __nv_bfloat16* x, const float* weight, const float* save_mean,
                         const float* save_rstd, __nv_bfloat16* grad_x, float* grad_weight,
                         float* grad_bias, cudaStream_t stream);

}  // namespace stoke::cuda
