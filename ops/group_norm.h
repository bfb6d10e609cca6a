// The kernels behind stoke::group_norm and stoke::layer_norm (autograd/group_norm.h, documented
// there): ops::group_norm and ops::layer_norm take the same arguments and compute the same results
// without recording autograd. Declared here: the options (in namespace stoke), and what only ops::
// has: the forwards that also return the statistics, and the backwards. Both are one kernel
// family: the contiguous input is viewed as (N, G, K, S), statistics are taken over each (n, g)'s
// K * S values and weight / bias (G * K) index the (g, k) pair.
//   group_norm(x (N, C, *), G):        (N, G, C / G, prod(*)), weight (C)
//   layer_norm(x (*, D1..Dm), (D1..Dm)): (prod(*), 1, D1 * ... * Dm, 1), weight (D1..Dm)
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace stoke {

// layer_norm(x, {64}, w, b, {.eps = 1e-6}). In namespace stoke (ops:: names it too).
struct NormOptions {
  double eps = 1e-5;  // added to the variance before the square root
};

}  // namespace stoke

namespace stoke::ops {

using stoke::NormOptions;

// The (N, G, K, S) view of a contiguous input (see the file comment).
struct GroupNormLayout {
  int64_t batch = 0, groups = 1, channels_per_group = 1, spatial = 1;
};

// The output and, per (n, g), the mean and 1 / sqrt(var + eps) the backward needs: (N * G)
// tensors of the input's dtype (f32 for f16 / bf16 inputs on cuda).
struct GroupNormForward {
  Tensor output;
  Tensor save_mean;
  Tensor save_rstd;
};

// Gradients from the backward; each is undefined when not asked for (or weight / bias absent).
struct GroupNormGrads {
  Tensor grad_input;
  Tensor grad_weight;  // the weight's shape
  Tensor grad_bias;
};

// stoke::group_norm's forward with its statistics, its output alone, its backward.
GroupNormForward group_norm_forward(const Tensor& input, int64_t num_groups, const Tensor& weight,
                                    const Tensor& bias, const NormOptions& options = {});
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, const NormOptions& options = {});
GroupNormGrads group_norm_backward(const Tensor& grad_output, const Tensor& input,
                                   int64_t num_groups, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_rstd,
                                   std::array<bool, 3> output_mask = {true, true, true});

// The same for stoke::layer_norm.
GroupNormForward layer_norm_forward(const Tensor& input, const Shape& normalized_shape,
                                    const Tensor& weight, const Tensor& bias,
                                    const NormOptions& options = {});
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, const NormOptions& options = {});
GroupNormGrads layer_norm_backward(const Tensor& grad_output, const Tensor& input,
                                   const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_rstd,
                                   std::array<bool, 3> output_mask = {true, true, true});

}  // namespace stoke::ops
