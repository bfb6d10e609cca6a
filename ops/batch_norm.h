// The kernels behind stoke::batch_norm (autograd/batch_norm.h, documented there): ops::batch_norm
// takes the same arguments and computes the same result without recording autograd. Declared
// here: the options (in namespace stoke), and what only ops:: has: the forward that also returns
// the statistics, and the backward.
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

// stoke::batch_norm's forward, with the statistics the backward needs.
BatchNormForward batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                    const Tensor& running_var, const Tensor& weight,
                                    const Tensor& bias, const BatchNormOptions& options);
// batch_norm_forward(...).output.
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
