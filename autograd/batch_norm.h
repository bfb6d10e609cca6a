// Differentiable batch normalization: stoke::batch_norm, with PyTorch's semantics (see
// ops/batch_norm.h). Input, weight and bias are differentiated; the running statistics are buffers,
// updated in place in training and never differentiated.
#pragma once

#include "core/tensor.h"
#include "ops/batch_norm.h"

namespace stoke {

// batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, {.training = true}).
// With {.relu = true} it is relu(batch_norm(...)) fused, forward and backward (one node).
// x is (N, C, ...); the other tensors are (C) and each may be undefined (running statistics both
// or neither: without them batch statistics are always used, see ops::batch_norm_forward).
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, const BatchNormOptions& options = {});

}  // namespace stoke
