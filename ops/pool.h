// The kernels behind stoke::max_pool2d, avg_pool2d and adaptive_avg_pool2d (autograd/pool.h,
// documented there): the ops:: functions of the same names take the same arguments and compute
// the same results without recording autograd. Declared here: the options (in namespace stoke),
// and what only ops:: has: the output size, max pooling with its indices, and the backward
// kernels autograd composes.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace stoke {

// Window geometry shared by max_pool2d and avg_pool2d:
//   max_pool2d(x, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}).
// Declared in namespace stoke (ops:: names it too) so that argument-dependent lookup of an
// unqualified max_pool2d(x, options) finds only the differentiable stoke::max_pool2d.
struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size{0, 0};
  std::array<int64_t, 2> stride{0, 0};   // 0 = kernel_size, as torch's default
  std::array<int64_t, 2> padding{0, 0};  // implicit -inf (max) / 0 (avg) border; <= kernel/2
  bool ceil_mode = false;                // round the output size up (the last window may hang over)
  bool count_include_pad = true;         // avg only: padded positions count in the divisor
};

}  // namespace stoke

namespace stoke::ops {

using stoke::Pool2dOptions;

// Output of max_pool2d_with_indices: the pooled values and, for each, the flat index (h * W + w)
// of the chosen input element inside its (H, W) plane, as i64 (what max_pool2d_backward needs).
struct MaxPool2dResult {
  Tensor output;
  Tensor indices;
};

// Output size of one pooled dimension, exactly as PyTorch computes it (may be < 1: callers check).
int64_t pool_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad,
                         bool ceil_mode);

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options);
// max_pool2d that also returns the argmax indices for the backward.
MaxPool2dResult max_pool2d_with_indices(const Tensor& input, const Pool2dOptions& options);
// Scatters grad_output into a zero tensor of `input_shape` at `indices`. `options`, the forward's
// window, is optional: the CPU scatters by index alone, while the CUDA kernel gathers (each input
// element sums the outputs whose window holds it, deterministic, no atomics) and without the
// window scans every output of the plane.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                           const Shape& input_shape, const Pool2dOptions& options = {});

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
// Gradient of avg_pool2d with respect to its input of `input_shape`.
Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape,
                           const Pool2dOptions& options);

Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size);
// Gradient of adaptive_avg_pool2d with respect to its input of `input_shape`.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape);

}  // namespace stoke::ops
