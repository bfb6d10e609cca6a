// cuDNN spatial batch normalization (real builds only) on NCHW tensors (N, C) or (N, C, H, W) in
// f32, f16 or bf16, with PyTorch's semantics: batch statistics over N, H, W; the running mean and
// the unbiased running variance updated with `momentum`; save_mean / save_invstd (1/sqrt(var +
// eps)) for the backward. Per-channel tensors (weight, bias, running and saved statistics, their
// gradients) are always f32 (cuDNN computes in f32 for half inputs).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// Shape and dtype of a batch-norm input; h = w = 1 for (N, C).
struct BatchNormGeometry {
  int64_t n = 1, c = 1, h = 1, w = 1;
  DType dtype = DType::f32;
};

// Training forward. running_mean/running_var may both be null (no update). eps >= 1e-5 (cuDNN's
// minimum). Runs on `stream` on the current device.
void batch_norm_forward_training(const BatchNormGeometry& g, const void* x, void* y,
                                 const float* weight, const float* bias, float* running_mean,
                                 float* running_var, double momentum, double eps, float* save_mean,
                                 float* save_invstd, cudaStream_t stream);
// Evaluation forward from the running statistics.
void batch_norm_forward_inference(const BatchNormGeometry& g, const void* x, void* y,
                                  const float* weight, const float* bias, const float* running_mean,
                                  const float* running_var, double eps, cudaStream_t stream);
// Training backward: dx, and d(weight)/d(bias) (f32, overwritten).
void batch_norm_backward(const BatchNormGeometry& g, const void* x, const void* dy, void* dx,
                         const float* weight, float* grad_weight, float* grad_bias,
                         const float* save_mean, const float* save_invstd, double eps,
                         cudaStream_t stream);

}  // namespace stoke::cuda
