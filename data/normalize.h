// The consumer side of a batch: uint8 NHWC pixels become normalized f32, f16 or bf16 NCHW,
// computing (x / 255 - mean[c]) / std[c] in one fused pass (read u8, scale, shift, cast, transpose)
// spread over the thread pool (the op is ops::normalize_u8_nhwc, ops/normalize.h). Batches stay
// uint8 until here so that workers move 4x fewer bytes; the CUDA backend does the same in one
// kernel after the host-to-device copy (docs/design.md, "Data").
#pragma once

#include <vector>

#include "core/tensor.h"

namespace stoke::data {

// normalize options: {.mean = {0.286f}, .std = {0.353f}, .dtype = DType::f16}.
struct NormalizeOptions {
  std::vector<float> mean = {0.f};  // one value for every channel, or one per channel
  std::vector<float> std = {1.f};   // likewise; no zeros
  DType dtype = DType::f32;         // f32, f16 or bf16
  // The output's layout: channels_last gives NHWC memory (torch's channels_last), written by the
  // fused pass itself on cuda (through an NCHW buffer and a copy on the CPU).
  MemoryFormat memory_format = MemoryFormat::contiguous;
};

// images: contiguous u8 (N, H, W, C) on the CPU. Returns (N, C, H, W) of options.dtype with
// (x / 255 - mean[c]) / std[c], computed as x * (1 / (255 std[c])) - mean[c] / std[c] (one
// multiply-add, a few ulps from the literal formula, as InMemoryBatcher does).
Tensor normalize(const Tensor& images, const NormalizeOptions& options = {});

// As normalize(), into `out`: a tensor of shape (N, C, H, W) and dtype f32, f16 or bf16 on the
// images' device, contiguous or channels_last (reused across batches to avoid an allocation per
// step); options.dtype and memory_format are out's.
void normalize_into(const Tensor& images, const Tensor& out, const NormalizeOptions& options = {});

// Augmentation where the batch is consumed (on the GPU after the upload, as DALI does, instead of
// on the loader's CPU workers): a random crop with zero padding and a horizontal flip, folded into
// the normalize pass. The random choices are those that
//   Compose({RandomCrop({.height, .width, .padding}), HorizontalFlip({.p = flip_p})})
// makes on the workers for the same (seed, epoch, sample index) (data/transforms.h), so the two
// paths give the same batches and a run can switch between them.
struct CropFlipOptions {
  int64_t height = 0;  // the crop's size; 0 = the image's
  int64_t width = 0;
  int64_t padding = 0;  // zeros added on each side before cropping (torchvision's padding=p)
  float flip_p = 0.5f;  // probability of mirroring (0: never; the draw happens regardless)
};

// Writes each sample's (top, left, flip) into `crops`, a contiguous i32 (N, 3) CPU tensor (pinned
// memory when it is going to a GPU), for the samples of dataset index indices[i] (i64 (N)) of an
// image of height x width: top and left are the crop's corner in image coordinates (negative or
// past the edge: the padding), flip is 0 or 1. Errors name "crop_flip" and what does not fit.
void draw_crops_into(const Tensor& crops, const Tensor& indices, int64_t height, int64_t width,
                     const CropFlipOptions& options, uint64_t seed, int64_t epoch);
Tensor draw_crops(const Tensor& indices, int64_t height, int64_t width,
                  const CropFlipOptions& options, uint64_t seed, int64_t epoch);

// images: contiguous u8 (N, H, W, C) on any device; crops from draw_crops (copied to the images'
// device when it is on the CPU and they are not); returns (N, C, OH, OW) of options.dtype (f32, f16
// or bf16) with (OH, OW) = (crop_height, crop_width) (0 = H, W): the crop of each image, flipped
// where its flag says, normalized as normalize() does, in one pass
// (ops::crop_flip_normalize_u8_nhwc).
Tensor crop_flip_normalize(const Tensor& images, const Tensor& crops,
                           const NormalizeOptions& options = {}, int64_t crop_height = 0,
                           int64_t crop_width = 0);

}  // namespace stoke::data
