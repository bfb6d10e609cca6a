// The kernels behind stoke::conv2d and stoke::conv_transpose2d (autograd/conv2d.h, documented
// there): ops::conv2d and ops::conv_transpose2d take the same arguments and compute the same
// results without recording autograd. Declared here: the options (in namespace stoke), and what
// only ops:: has: the output size and the backward kernels.
// CPU: im2col + GEMM per sample and group, parallel over the batch; 1x1 stride-1 unpadded
// convolutions are plain GEMMs and depthwise convolutions (groups == C == K) use a direct loop.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace stoke {

// conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}}). Pairs are (height, width). Declared in
// namespace stoke (not ops) so that argument-dependent lookup of an unqualified conv2d(x, w, b,
// options) finds only the differentiable stoke::conv2d, never this raw kernel as well.
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

// conv_transpose2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}):
// torch's ConvTranspose2d. output_padding adds rows / columns at the bottom / right of the output
// (to pick among the sizes a strided convolution maps to the same input size); it must be
// smaller than the stride.
struct ConvTranspose2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> output_padding{0, 0};
  int64_t groups = 1;
  std::array<int64_t, 2> dilation{1, 1};
};

}  // namespace stoke

namespace stoke::ops {

using stoke::Conv2dOptions;
using stoke::ConvTranspose2dOptions;

// Output spatial size (OH, OW) of a convolution of an (H, W) input with a (kh, kw) kernel; throws
// naming all parameters when it would be empty.
std::array<int64_t, 2> conv2d_output_size(const std::array<int64_t, 2>& input_size,
                                          const std::array<int64_t, 2>& kernel_size,
                                          const Conv2dOptions& options);

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options = {});

// Gradients of conv2d given grad_out (N, K, OH, OW). Only the requested ones are computed
// (others undefined); grad_bias is the sum of grad_out over N, OH and OW.
struct Conv2dGrads {
  Tensor grad_input, grad_weight, grad_bias;
};
Conv2dGrads conv2d_backward(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                            const Conv2dOptions& options, bool need_input, bool need_weight,
                            bool need_bias);

// The three gradients separately (each one conv2d_backward call asking for just that one).
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                             const Conv2dOptions& options);
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                              const Conv2dOptions& options);
Tensor conv2d_backward_bias(const Tensor& grad_out);

// It runs conv2d_backward's input-gradient kernels (on the GPU cuDNN's): no kernel of its own.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dOptions& options = {});
// The conv2d options of the convolution a transposed convolution is the input gradient of.
Conv2dOptions conv_transpose2d_as_conv(const ConvTranspose2dOptions& options);

}  // namespace stoke::ops
