#include "data/normalize.h"

#include "core/error.h"
#include "data/transforms.h"
#include "ops/memory_format.h"
#include "ops/normalize.h"

namespace stoke::data {

namespace {

constexpr const char* kNormalizeOp = "normalize";

}  // namespace

void normalize_into(const Tensor& images, const Tensor& out, const NormalizeOptions& options) {
  // The checks and the kernels (CPU, cuda) are the op's: ops/normalize.h.
  ops::normalize_u8_nhwc(images, out, options.mean, options.std);
}

Tensor normalize(const Tensor& images, const NormalizeOptions& options) {
  STOKE_CHECK(images.defined() && images.dim() == 4, kNormalizeOp,
              "expected images of shape (N, H, W, C), got ",
              images.defined() ? images.shape() : Shape{});
  STOKE_CHECK(
      options.dtype == DType::f32 || options.dtype == DType::f16 || options.dtype == DType::bf16,
      kNormalizeOp, "expected dtype f32 or f16 (or bf16), got ", options.dtype);
  Tensor out = ops::empty_in_format(
      {images.size(0), images.size(3), images.size(1), images.size(2)},
      {.dtype = options.dtype, .device = images.device()}, options.memory_format);
  normalize_into(images, out, options);
  return out;
}

void draw_crops_into(const Tensor& crops, const Tensor& indices, int64_t height, int64_t width,
                     const CropFlipOptions& o, uint64_t seed, int64_t epoch) {
  constexpr const char* op = "crop_flip";
  STOKE_CHECK(indices.defined() && indices.dtype() == DType::i64 && indices.dim() == 1 &&
                  indices.device().is_cpu(),
              op, "expected indices as an i64 (N) CPU tensor");
  const int64_t n = indices.size(0);
  STOKE_CHECK(crops.defined() && crops.dtype() == DType::i32 && crops.shape() == Shape({n, 3}) &&
                  crops.is_contiguous() && crops.device().is_cpu(),
              op, "expected crops as a contiguous i32 CPU tensor of shape ", Shape({n, 3}));
  const int64_t p = o.padding, oh = o.height > 0 ? o.height : height,
                ow = o.width > 0 ? o.width : width;
  STOKE_CHECK(height > 0 && width > 0 && o.height >= 0 && o.width >= 0 && p >= 0, op,
              "expected an image of positive size and height, width, padding >= 0, got image ",
              height, "x", width, ", crop ", o.height, "x", o.width, ", padding ", p);
  STOKE_CHECK(oh <= height + 2 * p && ow <= width + 2 * p, op, "expected a crop of at most ",
              height + 2 * p, "x", width + 2 * p, " (", height, "x", width, " padded by ", p,
              "), got ", oh, "x", ow);
  STOKE_CHECK(o.flip_p >= 0.f && o.flip_p <= 1.f, op, "expected flip_p in [0, 1], got ", o.flip_p);
  const Tensor idx = indices.contiguous();
  const int64_t* ip = idx.data<int64_t>();
  int32_t* k = crops.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    // RandomCrop::apply's draws, then HorizontalFlip::apply's, from the sample's stream.
    SampleRng rng(seed, epoch, ip[i]);
    const int64_t top = rng.below(height + 2 * p - oh + 1) - p;
    const int64_t left = rng.below(width + 2 * p - ow + 1) - p;
    const bool flip = rng.uniform() < o.flip_p;
    k[3 * i] = static_cast<int32_t>(top);
    k[3 * i + 1] = static_cast<int32_t>(left);
    k[3 * i + 2] = flip ? 1 : 0;
  }
}

Tensor draw_crops(const Tensor& indices, int64_t height, int64_t width, const CropFlipOptions& o,
                  uint64_t seed, int64_t epoch) {
  Tensor crops = empty({indices.defined() && indices.dim() == 1 ? indices.size(0) : 0, 3},
                       {.dtype = DType::i32});
  draw_crops_into(crops, indices, height, width, o, seed, epoch);
  return crops;
}

Tensor crop_flip_normalize(const Tensor& images, const Tensor& crops,
                           const NormalizeOptions& options, int64_t crop_height,
                           int64_t crop_width) {
  constexpr const char* op = "crop_flip_normalize";
  STOKE_CHECK(images.defined() && images.dim() == 4, op,
              "expected images of shape (N, H, W, C), got ",
              images.defined() ? images.shape() : Shape{});
  STOKE_CHECK(crop_height >= 0 && crop_width >= 0, op, "expected crop sizes >= 0, got ",
              crop_height, "x", crop_width);
  const int64_t oh = crop_height > 0 ? crop_height : images.size(1),
                ow = crop_width > 0 ? crop_width : images.size(2);
  Tensor out = ops::empty_in_format({images.size(0), images.size(3), oh, ow},
                                    {.dtype = options.dtype, .device = images.device()},
                                    options.memory_format);
  // Crops drawn on the host go to the device with the batch: asynchronously from pinned memory.
  const Tensor k = crops.defined() && crops.device() != images.device()
                       ? crops.to(images.device(), /*non_blocking=*/true)
                       : crops;
  ops::crop_flip_normalize_u8_nhwc(images, out, k, options.mean, options.std);
  return out;
}

}  // namespace stoke::data
