// Differentiable losses, with PyTorch's semantics (torch.nn.functional's functions of the same
// names); the option types are in ops/loss.h:
//   Tensor loss = cross_entropy(logits, target, {.label_smoothing = 0.1});
#pragma once

#include "ops/loss.h"

namespace stoke {

// Cross entropy of logits (N, C) (f32/f64) against class indices (N, i64); differentiable w.r.t.
// logits. Per row: (1 - eps) * (lse - x[t]) + eps * mean_c(lse - x[c]), eps the label smoothing,
// 0 on ignored rows; mean divides the sum by the number of non-ignored rows (their total weight
// with per-class weights), none returns the per-row losses. Also dense prediction, logits
// (N, C, d1, ...) against (N, d1, ...), one sample (C) against a 0-dim target, and per-class
// weights ({.weight = w}), as torch.nn.functional.cross_entropy.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});
// Negative log-likelihood of log-probabilities (N, C) at class indices (N, i64); the same shapes
// and weights as cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});
// Mean squared error (input - target)^2; input and target have the same shape and dtype.
// Differentiable w.r.t. both.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

// The elementwise losses below (autograd/loss_elementwise.cpp) are composed of differentiable
// elementwise ops, so they run on every device and their gradients come from autograd; input and
// target have the same shape, and f16/bf16 inputs are computed in f32 (as torch's autocast does).
// All are differentiable w.r.t. input and target (weights are constants, as in torch).

// |input - target| (F.l1_loss).
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, d = input - target (F.smooth_l1_loss;
// beta = 0 is l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::mean, double beta = 1.0);

// F.kl_div(input, target): input holds log-probabilities; target probabilities, or
// log-probabilities with log_target. batchmean divides the sum by input.size(0), the
// mathematically right KL divergence per sample (mean divides by every element, as torch).
enum class KlDivReduction { none, batchmean, sum, mean };
struct KlDivOptions {
  KlDivReduction reduction = KlDivReduction::mean;
  bool log_target = false;
};
Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivOptions& options = {});

struct BceOptions {
  Reduction reduction = Reduction::mean;
  Tensor weight{};  // broadcast to the input's shape: a weight per element, a constant
  // binary_cross_entropy_with_logits only: the positive class's weight, broadcast along the last
  // dim (one per class of a multi-label target), as torch's pos_weight.
  Tensor pos_weight{};
};
// -w (t log x + (1 - t) log(1 - x)) of probabilities x in [0, 1], each log clamped at -100 as in
// torch (F.binary_cross_entropy). Inputs outside [0, 1] are an error on the CPU.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const BceOptions& options = {});
// The same on logits, computed stably as (1 - t) x + (1 + (p - 1) t) softplus(-x), p the
// pos_weight (F.binary_cross_entropy_with_logits).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceOptions& options = {});

}  // namespace stoke
