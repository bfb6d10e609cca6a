// CPU kernels of the losses that have no ops::Backend method (ops/backend_methods.h): nll_loss,
// mse_loss, their backward, and the target check of class_targets. Other devices compose them from
// their methods (gather, where, reductions: ops/loss.cpp); the CPU keeps its one-pass kernels.
// Each takes the arguments after the entry point's checks. Internal header of ops/loss.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/loss.h"

namespace stoke::ops::cpu {

Tensor class_targets(const char* op, const Tensor& target, int64_t classes, int64_t ignore_index);
// log_probs (N, C) and target (N): checked here (dtypes, shapes, every target value).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options);
Tensor nll_loss_backward(const Tensor& grad, const Shape& input_shape, const Tensor& target,
                         const NllLossOptions& options);
// input and target of one shape and dtype.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction);
// grad's shape checked against the reduction.
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                         Reduction reduction);

}  // namespace stoke::ops::cpu
