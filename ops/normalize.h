// Normalization of u8 images (no autograd): the fused pass that turns a batch of NHWC pixels into
// normalized NCHW floats (read u8, scale, shift, cast, transpose), used by data::normalize
// (data/normalize.h) on the CPU and, after the host-to-device copy, on cuda.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace stoke::ops {

// out (N, C, H, W) = (images (N, H, W, C) u8 / 255 - mean[c]) / std[c], computed as
// x * (1 / (255 std[c])) - mean[c] / std[c] (one multiply-add, a few ulps from the literal
// formula). images: contiguous u8 with 4 dims; out: contiguous f32 or f16 of shape (N, C, H, W) on
// the same device; mean and std: 1 value (every channel) or C values, std without zeros. Messages
// name the op "normalize", the name users call it by (data::normalize).
void normalize_u8_nhwc(const Tensor& images, const Tensor& out, const std::vector<float>& mean,
                       const std::vector<float>& std);

}  // namespace stoke::ops
