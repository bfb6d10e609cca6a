// Optimizer update rules as in-place ops (no autograd): PyTorch's rules (torch.optim.SGD / Adam /
// AdamW) over a list of parameters in one fused multi-tensor pass (fused_sgd_, fused_adam_: on
// cuda apex's multi_tensor_apply, a whole model in a launch or a few), the single-tensor forms
// being lists of one; and the mixed-precision passes over all gradients: the unscale with its
// non-finite check (GradScaler) and the sum of squares of the global gradient norm (clipping).
//
//   ops::fused_sgd_(params, grads, bufs, {.lr = 0.1, .momentum = 0.9, .first_step = !stepped});
//   ops::adam_step_(p, p.grad(), m, v, {.lr = 1e-3, .weight_decay = 1e-2, .decoupled = true,
//                                       .step = ++t});
//
// Dtypes: f32, f64 (CPU only), f16 or bf16 parameters, the gradients and the state of each
// parameter's dtype, shape and device (one dtype and device per call); f16/bf16 are updated in f32
// and rounded back. Parameters and state are written in place and must be contiguous; gradients
// may be strided. Run under NoGradGuard when the parameters require grad (as optimizer steps do).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke::ops {

// torch.optim.SGD's rule, with d = grad + weight_decay * param:
//   momentum == 0: param -= lr * d
//   else: buf = first_step ? d : momentum * buf + (1 - dampening) * d,
//         param -= lr * (nesterov ? d + momentum * buf : buf)
struct SgdStepOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  // The buffer's first update: it becomes d (torch clones the first d), its old values unread.
  bool first_step = false;
  // Decided on the device, without a host read (the GradScaler's skip): when found_inf (a
  // one-element f32 tensor on the parameters' device) is defined and nonzero, the call changes
  // nothing. step_counts, when given, holds one one-element f32 tensor per parameter (on its
  // device) counting the steps applied to it: each is advanced by 1 unless found_inf is set, and
  // a buffer's first update is where its count becomes 1 (first_step is not read).
  Tensor found_inf = {};
  std::vector<Tensor> step_counts = {};
  // The learning rate in device memory (torch's capturable optimizers with a Tensor lr): a
  // one-element f64 tensor on the parameters' device, read when the update runs, in place of lr.
  // A CUDA graph that captured the step then follows a schedule that fills it between replays.
  Tensor lr_tensor = {};
};

// momentum_buffer is read and written when momentum != 0 (then it must be defined), else ignored
// (an undefined tensor is fine).
void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
               const SgdStepOptions& options);

// torch.optim.Adam's rule (AdamW's with decoupled), t = step:
//   decoupled: param *= 1 - lr * weight_decay, d = grad; else d = grad + weight_decay * param
//   exp_avg = beta1 * exp_avg + (1 - beta1) * d
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * d * d
//   param -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
// and with amsgrad (Reddi et al.; torch's amsgrad=True) the largest exp_avg_sq so far divides:
//   max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), read in place of exp_avg_sq above.
struct AdamStepOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  bool amsgrad = false;    // then max_exp_avg_sq(s) is given, zeros before the first step
  int64_t step = 1;        // this update's number, counting from 1 (the bias corrections')
  // As SgdStepOptions' (device-side skip): with step_counts each parameter's update number is its
  // advanced count, and step is not read.
  Tensor found_inf = {};
  std::vector<Tensor> step_counts = {};
  // As SgdStepOptions' lr_tensor: the decoupled decay and the step size are made from it where
  // the update runs.
  Tensor lr_tensor = {};
};

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const AdamStepOptions& options);
// The same with amsgrad's running maximum (options.amsgrad must be set).
void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                const AdamStepOptions& options);

// torch._amp_update_scale_, the GradScaler's update kept on the device: every tensor a
// one-element f32 on one device. After a step with an inf/NaN gradient (found_inf != 0) scale
// becomes scale * backoff_factor (below min_scale it stays and `collapsed` becomes 1, for the
// caller to report at its next read), growth_tracker 0, and `skipped` counts the step; after a
// finite one growth_tracker counts it, and at growth_interval the scale grows (capped at
// max_scale) and growth_tracker returns to 0. The arithmetic is f32, as torch keeps the scale.
struct AmpUpdateScaleOptions {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0;
  double max_scale = 18446744073709551616.0;
};
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped,
                       const Tensor& collapsed, const Tensor& found_inf,
                       const AmpUpdateScaleOptions& options);

// The scalars of Adam's update for options.step, computed once in f64 as torch does: every
// backend converts these (not lr and the betas' powers) to its compute dtype, so that the devices
// agree to the last bit of the conversion.
struct AdamStepScalars {
  double step_size;   // lr / bias1
  double bias2_sqrt;  // sqrt(1 - beta2^step)
  double bias1;       // 1 - beta1^step (a device lr divides by it where the update runs)
};
AdamStepScalars adam_step_scalars(const AdamStepOptions& options);

// The multi-tensor forms: params[i] with grads[i] (and momentum_buffers[i] when momentum != 0,
// else the list may be empty), one set of options for all. Empty tensors and empty lists are
// fine. fused_sgd_ on lists of one is sgd_step_, bit for bit.
void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& options);
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const AdamStepOptions& options);
// With amsgrad (options.amsgrad set, max_exp_avg_sqs as long as params; empty without it).
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepOptions& options);

// torch._amp_foreach_non_finite_check_and_unscale_: every gradient g becomes g * inv_scale, and
// found_inf becomes 1 when any element (before scaling) is inf or NaN, else keeps its value.
// found_inf and inv_scale are one-element f32 tensors on the gradients' device (nothing is read
// back: on cuda the flag stays a device scalar); the gradients (f32, f64 on the CPU, f16, bf16,
// dtypes may differ between them) are contiguous and written in place.
void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                   const Tensor& inv_scale);

// The sum of the squares of every element of every tensor (one device, any floating dtypes), as a
// 0-dim tensor on that device: f64 on the CPU (accumulated in f64), f32 on cuda (f32 partials per
// 65,536-element chunk, added in a fixed order). sqrt of it is the global L2 norm that
// clip_grad_norm_ scales by.
Tensor sum_of_squares(const std::vector<Tensor>& tensors);

}  // namespace stoke::ops
