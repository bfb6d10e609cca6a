// The consumer side of a batch: uint8 NHWC pixels become normalized f32 or f16 NCHW, computing
// (x / 255 - mean[c]) / std[c] in one fused pass (read u8, scale, shift, cast, transpose) spread
// over the thread pool (the op is ops::normalize_u8_nhwc, ops/normalize.h). Batches stay uint8
// until here so that workers move 4x fewer bytes; the CUDA backend does the same in one kernel
// after the host-to-device copy (docs/design.md, "Data").
#pragma once

#include <vector>

#include "core/tensor.h"

namespace stoke::data {

// normalize options: {.mean = {0.286f}, .std = {0.353f}, .dtype = DType::f16}.
struct NormalizeOptions {
  std::vector<float> mean = {0.f};  // one value for every channel, or one per channel
  std::vector<float> std = {1.f};   // likewise; no zeros
  DType dtype = DType::f32;         // f32 or f16
};

// images: contiguous u8 (N, H, W, C) on the CPU. Returns (N, C, H, W) of options.dtype with
// (x / 255 - mean[c]) / std[c], computed as x * (1 / (255 std[c])) - mean[c] / std[c] (one
// multiply-add, a few ulps from the literal formula, as InMemoryBatcher does).
Tensor normalize(const Tensor& images, const NormalizeOptions& options = {});

// As normalize(), into `out`: a contiguous CPU tensor of shape (N, C, H, W) and dtype f32 or f16
// (reused across batches to avoid an allocation per step).
void normalize_into(const Tensor& images, const Tensor& out, const NormalizeOptions& options = {});

}  // namespace stoke::data
