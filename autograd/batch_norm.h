// Differentiable batch normalization: stoke::batch_norm, with PyTorch's semantics: batch
// statistics over all dims but the channel dim 1 (biased variance for normalizing, unbiased for
// the running variance), running statistics updated in place with `momentum` in training,
// evaluation from the running statistics. Input, weight and bias are differentiated; the running
// statistics are buffers, never differentiated. The options are BatchNormOptions
// (ops/batch_norm.h).
#pragma once

#include "core/tensor.h"
#include "ops/batch_norm.h"

namespace stoke {

// batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, {.training = true}).
// With {.relu = true} it is relu(batch_norm(...)) fused, forward and backward (one node).
// x is (N, C, ...) (any number of trailing dims, (N, C) included); the other tensors are (C).
// running_mean / running_var may both be undefined: batch statistics are then used in training
// and evaluation alike (PyTorch's track_running_stats=False) and nothing is updated. weight /
// bias are optional (1 and 0).
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, const BatchNormOptions& options = {});

}  // namespace stoke
