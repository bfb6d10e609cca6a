// Optimizer update rules as in-place ops (no autograd): one parameter tensor and its state updated
// by PyTorch's single-tensor rules (torch.optim.SGD / Adam / AdamW with foreach=False), one fused
// pass per rule on every device. nn::optim's optimizers call these for each parameter; fused
// multi-tensor versions build on the same rules.
//
//   ops::sgd_step_(p, p.grad(), buf, {.lr = 0.1, .momentum = 0.9, .first_step = !stepped});
//   ops::adam_step_(p, p.grad(), m, v, {.lr = 1e-3, .weight_decay = 1e-2, .decoupled = true,
//                                       .step = ++t});
//
// Dtypes: f32 or f64 parameters (master weights; cuda: f32), with the gradient and the state of
// the parameter's dtype, shape and device. The parameter and the state are written in place and
// must be contiguous; the gradient may be strided. Run under NoGradGuard when the parameter
// requires grad (as optimizer steps do).
#pragma once

#include <cstdint>

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
struct AdamStepOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  int64_t step = 1;        // this update's number, counting from 1 (the bias corrections')
};

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const AdamStepOptions& options);

// The scalars of Adam's update for options.step, computed once in f64 as torch does: every
// backend converts these (not lr and the betas' powers) to its compute dtype, so that the devices
// agree to the last bit of the conversion.
struct AdamStepScalars {
  double step_size;   // lr / (1 - beta1^step)
  double bias2_sqrt;  // sqrt(1 - beta2^step)
};
AdamStepScalars adam_step_scalars(const AdamStepOptions& options);

}  // namespace stoke::ops
