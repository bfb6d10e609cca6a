// Batch normalization on the GPU with the semantics of ops/batch_norm.h (PyTorch's):
// statistics per channel over all dims but dim 1, biased variance to normalize,
// unbiased variance for the running statistics, save_mean / save_invstd for the
// backward. `relu` fuses a ReLU into the output pass (y = relu(bn(x))) and
// `relu_y` (that output) its backward into the backward's passes: dy counts
// only where relu_y > 0, and neither the pre-ReLU values nor ReLU's gradient
// are ever written. The input is contiguous (N, C, S) with S the product of the
// trailing dims, or (N, S, C) (BatchNormLayout::channels_last); it is f32, f16 or bf16, while the
// per-channel tensors (weight, bias, running and saved statistics, gradients of weight and bias)
// are f32, as cuDNN's mixed-precision batch norm does. All math is f32.
#pragma once

#include <cstdint>

#include "cuda/compat.h"

namespace stoke::cuda {

// The (N, C, S) view of the input: S = the product of the dims after the
// channel dim (1 for 2-D).
// channels_last: the memory is (N, S, C) instead, the channel fastest (a 4-d channels_last
// tensor's NHWC storage); the results equal the (N, C, S) layout's bit for bit.
struct BatchNormLayout {
  int64_t batch = 0, channels = 0, spatial = 1;
  bool channels_last = false;
};

// Training forward: per-channel mean and biased variance of x over (N, S), y =
// (x - mean) * invstd * weight + bias, save_mean / save_invstd (C floats each,
// required) receive the batch statistics, and when running_mean / running_var
// are non-null they become (1 - momentum) * running + momentum * batch
// (unbiased variance). weight / bias may be null (1 and 0). Needs N * S > 1.
void batch_norm_forward_training(const BatchNormLayout& l, const float* x, float* y,
                                 const float* weight, const float* bias, float* running_mean,
                                 float* running_var, float momentum, float eps, float* save_mean,
                                 float* save_invstd, cudaStream_t stream, bool relu = false);
void batch_norm_forward_training(const BatchNormLayout& l, const __half* x, __half* y,
                                 const float* weight, const float* bias, float* running_mean,
                                 float* running_var, float momentum, float eps, float* save_mean,
                                 float* save_invstd, cudaStream_t stream, bool relu = false);
void batch_norm_forward_training(const BatchNormLayout& l, const __nv_bfloat16* x, __nv_bfloat16* y,
                                 const float* weight, const float* bias, float* running_mean,
                                 float* running_var, float momentum, float eps, float* save_mean,
                                 float* save_invstd, cudaStream_t stream, bool relu = false);

// Evaluation forward from the running statistics (required): y = (x -
// running_mean) / sqrt(running_var + eps) * weight + bias. save_mean /
// save_invstd may be null; when given they receive running_mean and 1 /
// sqrt(running_var + eps), what the backward needs.
void batch_norm_forward_eval(const BatchNormLayout& l, const float* x, float* y,
                             const float* weight, const float* bias, const float* running_mean,
                             const float* running_var, float eps, float* save_mean,
                             float* save_invstd, cudaStream_t stream, bool relu = false);
void batch_norm_forward_eval(const BatchNormLayout& l, const __half* x, __half* y,
                             const float* weight, const float* bias, const float* running_mean,
                             const float* running_var, float eps, float* save_mean,
                             float* save_invstd, cudaStream_t stream, bool relu = false);
void batch_norm_forward_eval(const BatchNormLayout& l, const __nv_bfloat16* x, __nv_bfloat16* y,
                             const float* weight, const float* bias, const float* running_mean,
                             const float* running_var, float eps, float* save_mean,
                             float* save_invstd, cudaStream_t stream, bool relu = false);

// Floats of scratch batch_norm_backward needs for `channels` channels (two per
// channel).
inline int64_t batch_norm_backward_workspace_floats(int64_t channels) {
  return 2 * channels;
}

// Backward given the forward's save_mean / save_invstd. Any of grad_x,
// grad_weight, grad_bias may be null (not computed). `training` selects the
// formula: through the batch statistics, or a per-channel scale (eval: the
// statistics were constants). `workspace` (see
// batch_norm_backward_workspace_floats) is required when grad_weight, grad_bias
// or (training) grad_x is requested. weight may be null (1).
void batch_norm_backward(const BatchNormLayout& l, const float* grad_y, const float* x,
                         const float* weight, const float* save_mean, const float* save_invstd,
                         bool training, float* grad_x, float* grad_weight, float* grad_bias,
                         float* workspace, cudaStream_t stream, const float* relu_y = nullptr);
void batch_norm_backward(const BatchNormLayout& l, const __half* grad_y, const __half* x,
                         const float* weight, const float* save_mean, const float* save_invstd,
                         bool training, __half* grad_x, float* grad_weight, float* grad_bias,
                         float* workspace, cudaStream_t stream, const __half* relu_y = nullptr);
void batch_norm_backward(const BatchNormLayout& l, const __nv_bfloat16* grad_y,
                         const __nv_bfloat16* x, const float* weight, const float* save_mean,
                         const float* save_invstd, bool training, __nv_bfloat16* grad_x,
                         float* grad_weight, float* grad_bias, float* workspace,
                         cudaStream_t stream, const __nv_bfloat16* relu_y = nullptr);

}  // namespace stoke::cuda
