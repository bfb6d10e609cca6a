// Differentiable 2-D convolution (cross-correlation, as in PyTorch):
//   stoke::conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}}).
// The options are Conv2dOptions and ConvTranspose2dOptions (ops/conv2d.h).
#pragma once

#include "ops/conv2d.h"

namespace stoke {

// input (N, C, H, W), weight (K, C/groups, kh, kw), bias (K) or undefined -> (N, K, OH, OW); one
// sample (C, H, W) gives (K, OH, OW), as in torch. f32 or f64; all operands the same dtype.
// Gradients flow to every operand that requires grad (ops::conv2d_backward computes only those).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});

// The transposed convolution (the gradient of conv2d w.r.t. its input, as a layer): input
// (N, C_in, H, W), weight (C_in, C_out/groups, kh, kw) (torch's layout), bias (C_out) or undefined
// -> (N, C_out, OH, OW), OH = (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1;
// one sample (C_in, H, W) gives (C_out, OH, OW). Gradients flow to input, weight and bias.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose2dOptions& options = {});

}  // namespace stoke
