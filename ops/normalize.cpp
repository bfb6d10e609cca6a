// The normalize_u8_nhwc and crop_flip_normalize_u8_nhwc entry points: the checks, mean and std
// expanded to one value per channel, then the backend of the tensors' device
// (ops/cpu/normalize.cpp, ops/cuda/normalize.cpp).
#include "ops/normalize.h"

#include <utility>

#include "ops/backend.h"

namespace stoke::ops {

namespace {

// mean and std checked against c channels and expanded to one value per channel.
std::pair<std::vector<float>, std::vector<float>> per_channel(const char* op, int64_t c,
                                                              const std::vector<float>& mean,
                                                              const std::vector<float>& std) {
  const auto check = [&](const std::vector<float>& v, const char* what) {
    STOKE_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == c, op, "expected 1 or ", c, " ",
                what, " values (one per channel), got ", v.size());
  };
  check(mean, "mean");
  check(std, "std");
  std::vector<float> mean_c(static_cast<size_t>(c)), std_c(static_cast<size_t>(c));
  for (size_t ch = 0; ch < static_cast<size_t>(c); ++ch) {
    mean_c[ch] = mean[mean.size() == 1 ? 0 : ch];
    std_c[ch] = std[std.size() == 1 ? 0 : ch];
    STOKE_CHECK(std_c[ch] != 0.f, op, "expected std != 0, got 0 for channel ", ch);
  }
  return {std::move(mean_c), std::move(std_c)};
}

void check_images(const char* op, const Tensor& images, const Tensor& out) {
  STOKE_CHECK(images.defined() && out.defined(), op, "expected defined tensors");
  STOKE_CHECK(images.device() == out.device(), op,
              "expected images and out on the same device, got images on ", images.device(),
              " and out on ", out.device());
  STOKE_CHECK(images.dtype() == DType::u8, op, "expected u8 images, got ", images.dtype());
  STOKE_CHECK(images.dim() == 4, op, "expected images of shape (N, H, W, C), got ", images.shape());
  STOKE_CHECK(images.is_contiguous(), op, "expected contiguous images");
}

// out laid out as the backends write it: contiguous NCHW, or channels_last (NHWC memory).
bool dense_nchw_or_nhwc(const Tensor& out) {
  return out.is_contiguous() || out.is_contiguous(MemoryFormat::channels_last);
}

}  // namespace

void normalize_u8_nhwc(const Tensor& images, const Tensor& out, const std::vector<float>& mean,
                       const std::vector<float>& std) {
  constexpr const char* kOp = "normalize";
  check_images(kOp, images, out);
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  STOKE_CHECK(out.dtype() == DType::f32 || out.dtype() == DType::f16 || out.dtype() == DType::bf16,
              kOp, "expected an f32 or f16 (or bf16) output, got ", out.dtype());
  STOKE_CHECK(out.shape() == Shape({n, c, h, w}) && dense_nchw_or_nhwc(out), kOp,
              "expected an output of shape ", Shape({n, c, h, w}),
              " that is contiguous or channels_last, got shape ", out.shape(), " strides ",
              out.strides());
  // The backends take mean/std per channel (each folds them into its scale and bias).
  const auto [mean_c, std_c] = per_channel(kOp, c, mean, std);
  if (n == 0 || h == 0 || w == 0 || c == 0) return;
  dispatch(kOp, {&images, &out}).normalize_u8_nhwc(images, out, mean_c, std_c);
}

void crop_flip_normalize_u8_nhwc(const Tensor& images, const Tensor& out, const Tensor& crops,
                                 const std::vector<float>& mean, const std::vector<float>& std) {
  constexpr const char* kOp = "crop_flip_normalize";
  check_images(kOp, images, out);
  const int64_t n = images.size(0), c = images.size(3);
  STOKE_CHECK(out.dtype() == DType::f32 || out.dtype() == DType::f16 || out.dtype() == DType::bf16,
              kOp, "expected an f32, f16 or bf16 output, got ", out.dtype());
  STOKE_CHECK(out.dim() == 4 && out.size(0) == n && out.size(1) == c && dense_nchw_or_nhwc(out),
              kOp, "expected an output of shape (", n, ", ", c,
              ", OH, OW) that is contiguous or channels_last, got shape ", out.shape(), " strides ",
              out.strides());
  STOKE_CHECK(crops.defined() && crops.dtype() == DType::i32 && crops.shape() == Shape({n, 3}) &&
                  crops.is_contiguous(),
              kOp, "expected crops as a contiguous i32 tensor of shape ", Shape({n, 3}),
              " (top, left, flip per image), got ",
              crops.defined() ? detail::str_cat(crops.dtype(), " ", crops.shape()) : "none");
  STOKE_CHECK(crops.device() == images.device(), kOp, "expected crops on the images' device ",
              images.device(), ", got ", crops.device());
  if (crops.device().is_cpu()) {
    // The flags are read here where that is free; on a device the kernel reads any non-zero as 1.
    const int32_t* k = crops.data<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      STOKE_CHECK(k[3 * i + 2] == 0 || k[3 * i + 2] == 1, kOp, "expected flip 0 or 1, got ",
                  k[3 * i + 2], " for image ", i);
  }
  const auto [mean_c, std_c] = per_channel(kOp, c, mean, std);
  if (out.numel() == 0) return;
  dispatch(kOp, {&images, &out, &crops})
      .crop_flip_normalize_u8_nhwc(images, out, crops, mean_c, std_c);
}

}  // namespace stoke::ops
