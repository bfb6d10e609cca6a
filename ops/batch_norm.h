// Batch normalization kernels (no autograd), with PyTorch's semantics: batch statistics over all
// dims but the channel dim 1 (biased variance for normalizing, unbiased for the running
// variance), running statistics updated in place with `momentum`, evaluation from the running
// statistics.
#pragma once

#include <array>

#include "core/tensor.h"

namespace stoke {

// batch_norm(x, rm, rv, w, b, {.training = false}). In namespace stoke (ops:: names it too) so
// that argument-dependent lookup of an unqualified batch_norm(...) finds only stoke::batch_norm.
struct BatchNormOptions {
  bool training = true;   // normalize with batch statistics and update the running ones
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch
  double eps = 1e-5;      // added to the variance before the square root
  // relu(batch_norm(x)) in the same pass over the output (an epilogue: the normalized values are
  // never written); its backward is batch_norm_backward with relu_output.
  bool relu = false;
};

}  // namespace stoke

namespace stoke::ops {

using stoke::BatchNormOptions;

// Forward results: the output and, per channel, the mean and 1/sqrt(var + eps) that normalized it
// (batch statistics in training, running statistics in evaluation), which the backward needs.
struct BatchNormForward {
  Tensor output;
  Tensor save_mean;    // (C), input dtype
  Tensor save_invstd;  // (C), input dtype
};

// Gradients from batch_norm_backward; each is undefined when not asked for.
struct BatchNormGrads {
  Tensor grad_input;
  Tensor grad_weight;
  Tensor grad_bias;
};

// Batch norm over x of shape (N, C, ...) (any number of trailing dims, (N, C) included).
// running_mean / running_var (C) may both be undefined: batch statistics are then used in
// training and evaluation alike (PyTorch's track_running_stats=False) and nothing is updated.
// weight / bias (C) are optional (1 and 0). In training the running statistics are updated in
// place.
BatchNormForward batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                    const Tensor& running_var, const Tensor& weight,
                                    const Tensor& bias, const BatchNormOptions& options);
// Same as batch_norm_forward(...).output.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, const BatchNormOptions& options);

// Gradients of batch_norm given the forward's save_mean / save_invstd. `training` selects the
// formula: through the batch statistics (training) or a per-channel scale (statistics were
// constants). output_mask = {input, weight, bias} says which gradients to compute. With
// relu_output (the output of a forward with .relu = true, input's shape and dtype) these are the
// gradients of relu(batch_norm(x)): grad_output counts only where relu_output > 0, applied as the
// passes read it (ReLU's backward is never written out).
BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                   const Tensor& weight, const Tensor& save_mean,
                                   const Tensor& save_invstd, bool training,
                                   std::array<bool, 3> output_mask = {true, true, true},
                                   const Tensor& relu_output = Tensor());

}  // namespace stoke::ops
