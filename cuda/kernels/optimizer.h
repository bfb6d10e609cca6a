// CUDA optimizer and mixed-precision kernels over lists of tensors (apex's multi_tensor_apply):
// every tensor is cut into chunks of kMultiTensorChunk elements and one launch covers up to
// kMaxBlocksPerLaunch chunks of up to kMaxTensorsPerLaunch tensors, so a whole model's parameters
// take one launch or a few, not one per tensor. The rules are torch.optim's SGD and Adam/AdamW
// (the CPU's, ops/cpu/optimizer.cpp, operation for operation in f32 with the scalars converted
// from the same f64 values), torch's _amp_foreach_non_finite_check_and_unscale_, and a sum of
// squares for the global gradient norm.
//
// Storage dtypes: f32, f16 or bf16 (`dtype`, one for every list of a call); the arithmetic is in
// f32 (f16/bf16 values are loaded to f32 and rounded back on store). The pointers of list k are
// lists[k][i], tensor i has sizes[i] elements (0 allowed: skipped); no two arrays may overlap.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

constexpr int64_t kMultiTensorChunk = 65536;
constexpr int kMaxTensorsPerLaunch = 36;
constexpr int kMaxBlocksPerLaunch = 320;

// The chunks `sizes` make (the number of partial sums sum_of_squares writes).
int64_t multi_tensor_chunks(const std::vector<int64_t>& sizes);

// SGD's scalars as the CPU takes them (ops::SgdStepOptions): d = g + weight_decay * p (when
// weight_decay != 0); with momentum != 0, buf = first_step ? d : momentum * buf +
// (1 - dampening) * d and d = nesterov ? d + momentum * buf : buf; then p -= lr * d.
struct SgdStepArgs {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;
  // Decided on the device (the GradScaler's skip without a host read): when found_inf is given
  // and *found_inf != 0 the call changes nothing. When step_counts (one f32 count per tensor, in
  // device memory) are given, each count is first advanced by 1 unless *found_inf != 0, and a
  // tensor's first step is where its count is 1 (first_step is not read).
  const float* found_inf = nullptr;
  // The learning rate in device memory (one f64), read when the kernel runs in place of lr: a
  // captured launch then follows what is written there between replays.
  const double* lr_device = nullptr;
};

// One SGD step over every tensor of params (grads and, when momentum != 0, momentum_buffers of
// the same length; momentum_buffers is ignored otherwise).
void fused_sgd(DType dtype, const std::vector<void*>& params, const std::vector<const void*>& grads,
               const std::vector<void*>& momentum_buffers, const std::vector<int64_t>& sizes,
               const SgdStepArgs& args, cudaStream_t stream,
               const std::vector<float*>& step_counts = {});

// Adam's scalars: step_size = lr / (1 - beta1^t) and bias2_sqrt = sqrt(1 - beta2^t) computed in
// f64 by the caller (ops::adam_step_scalars). decoupled (AdamW): p *= 1 - lr * weight_decay;
// else d = g + weight_decay * p (when weight_decay != 0). amsgrad: max_v = max(max_v, v) divides
// in place of v.
struct AdamStepArgs {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;
  bool amsgrad = false;
  double step_size = 0;
  double bias2_sqrt = 1;
  double bias1 = 1;  // 1 - beta1^t: with lr_device, step_size = *lr_device / bias1 in f64
  // As SgdStepArgs': with step_counts, each tensor's update number is its advanced count, and
  // step_size and bias2_sqrt are computed from it in f64 as ops::adam_step_scalars does.
  const float* found_inf = nullptr;
  // As SgdStepArgs': lr in device memory; the decoupled decay (1 - lr * weight_decay) and the
  // step size are made from it in f64 where the kernel runs, as the host makes them from lr.
  const double* lr_device = nullptr;
};

// One Adam step over every tensor (param, exp_avg, exp_avg_sq and, with args.amsgrad,
// max_exp_avg_sq updated in place; max_exp_avg_sqs is ignored without amsgrad).
void fused_adam(DType dtype, const std::vector<void*>& params,
                const std::vector<const void*>& grads, const std::vector<void*>& exp_avgs,
                const std::vector<void*>& exp_avg_sqs, const std::vector<void*>& max_exp_avg_sqs,
                const std::vector<int64_t>& sizes, const AdamStepArgs& args, cudaStream_t stream,
                const std::vector<float*>& step_counts = {});

// torch._amp_foreach_non_finite_check_and_unscale_: every element g becomes g * *inv_scale, and
// *found_inf is set to 1 when any g (before scaling) is inf or NaN (else left as it was). Both
// scalars are f32 in device memory: nothing is read back to the host.
void non_finite_check_and_unscale(DType dtype, const std::vector<void*>& grads,
                                  const std::vector<int64_t>& sizes, float* found_inf,
                                  const float* inv_scale, cudaStream_t stream);

// torch._amp_update_scale_ on device scalars (one thread): after a step whose gradients had an
// inf/NaN (*found_inf != 0) the scale backs off (scale * backoff_factor; below min_scale it stays
// and *collapsed becomes 1, for the host to report at its next read), the growth tracker resets
// and *skipped counts the step; after a finite one the tracker counts it and, at growth_interval,
// the scale grows (capped at max_scale) and the tracker resets. f32 scale and counts (exact up to
// 2^24), as torch keeps its scale.
struct AmpUpdateScaleArgs {
  double growth_factor = 2, backoff_factor = 0.5, min_scale = 0, max_scale = 0;
  int64_t growth_interval = 2000;
};
void amp_update_scale(float* scale, float* growth_tracker, float* skipped, float* collapsed,
                      const float* found_inf, const AmpUpdateScaleArgs& args, cudaStream_t stream);

// *out = the sum of the squares of every element of every tensor, in f32: one partial per chunk
// (partials holds multi_tensor_chunks(sizes) floats), then one block adds the partials in order,
// so the result does not depend on scheduling.
void sum_of_squares(DType dtype, const std::vector<const void*>& tensors,
                    const std::vector<int64_t>& sizes, float* partials, float* out,
                    cudaStream_t stream);

}  // namespace stoke::cuda
