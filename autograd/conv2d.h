// Differentiable 2-D convolution: stoke::conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}}).
#pragma once

#include "ops/conv2d.h"

namespace stoke {

// input (N, C, H, W), weight (K, C/groups, kh, kw), bias (K) or undefined -> (N, K, OH, OW); one
// sample (C, H, W) gives (K, OH, OW), as in torch.
// Gradients flow to every operand that requires grad (ops::conv2d_backward computes only those).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});

// The transposed convolution (see ops::conv_transpose2d; weight (C_in, C_out/groups, kh, kw));
// gradients flow to input, weight and bias.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose2dOptions& options = {});

}  // namespace stoke
