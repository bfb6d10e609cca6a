// Differentiable 2-D pooling: stoke::max_pool2d, avg_pool2d, adaptive_avg_pool2d over (N, C, H, W)
// or (C, H, W) inputs, with PyTorch's semantics (window placement, ceil_mode, count_include_pad,
// adaptive window bounds, tie and NaN handling). The options are Pool2dOptions (ops/pool.h).
#pragma once

#include <array>

#include "core/tensor.h"
#include "ops/pool.h"

namespace stoke {

// Max pooling: max_pool2d(x, {.kernel_size = {2, 2}}). The first maximum in window scan order
// wins ties, NaN propagates. Records the argmax indices for backward.
Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options);
// Average pooling: avg_pool2d(x, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
// count_include_pad decides whether padding counts in the divisor.
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
// Adaptive average pooling to output_size = {OH, OW} ({1, 1} is global average pooling): output
// (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)) and the same for columns.
Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size);

}  // namespace stoke
