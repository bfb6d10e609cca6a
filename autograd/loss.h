// Differentiable losses (see ops/loss.h for the exact semantics, which follow PyTorch's):
//   Tensor loss = cross_entropy(logits, target, {.label_smoothing = 0.1});
#pragma once

#include "ops/loss.h"

namespace stoke {

// Cross entropy of logits (N, C) against class indices (N, i64); differentiable w.r.t. logits.
// Also dense prediction, logits (N, C, d1, ...) against (N, d1, ...), one sample (C) against a
// 0-dim target, and per-class weights ({.weight = w}), as torch.nn.functional.cross_entropy.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});
// Negative log-likelihood of log-probabilities (N, C) at class indices (N, i64); the same shapes
// and weights as cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});
// Mean squared error; differentiable w.r.t. both input and target.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace stoke
