// Normalization of u8 images (no autograd): the fused pass that turns a batch of NHWC pixels into
// normalized NCHW floats (read u8, scale, shift, cast, transpose), used by data::normalize
// (data/normalize.h) on the CPU and, after the host-to-device copy, on cuda; and the same pass
// with a per-sample crop (zero padding) and horizontal flip folded in, the augmentation done where
// the batch is consumed instead of on the loader's workers (data::crop_flip_normalize).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace stoke::ops {

// out (N, C, H, W) = (images (N, H, W, C) u8 / 255 - mean[c]) / std[c], computed as
// x * (1 / (255 std[c])) - mean[c] / std[c] (one multiply-add, a few ulps from the literal
// formula). images: contiguous u8 with 4 dims; out: f32, f16 or bf16 of shape (N, C, H, W) on the
// same device, contiguous or channels_last (NHWC memory: written directly on cuda, through an
// NCHW buffer and a copy on the CPU); mean and std: 1 value (every channel) or C values, std
// without zeros. Messages name the op "normalize", the name users call it by (data::normalize).
void normalize_u8_nhwc(const Tensor& images, const Tensor& out, const std::vector<float>& mean,
                       const std::vector<float>& std);

// out (N, C, OH, OW) [n, c, y, x] = normalize(pixel (sy, sx, c) of image n) with
//   sy = top[n] + y,  sx = left[n] + (flip[n] ? OW - 1 - x : x),
// a pixel outside the image (H, W) being 0 (zero padding) before normalization; crops is a
// contiguous i32 (N, 3) tensor of (top, left, flip) rows on the images' device (flip 0 or 1).
// This is RandomCrop (top-left corner (top, left) of the image padded with zeros) followed by
// HorizontalFlip. out: f32, f16 or bf16 (N, C, OH, OW), contiguous or channels_last, OH, OW >= 0 of
// any size; the
// rest as normalize_u8_nhwc. Messages name the op "crop_flip_normalize".
void crop_flip_normalize_u8_nhwc(const Tensor& images, const Tensor& out, const Tensor& crops,
                                 const std::vector<float>& mean, const std::vector<float>& std);

}  // namespace stoke::ops
