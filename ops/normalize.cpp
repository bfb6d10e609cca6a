// The normalize_u8_nhwc entry point: the checks, mean and std expanded to one value per channel,
// then the backend of the tensors' device (ops/cpu/normalize.cpp, ops/cuda/normalize.cpp).
#include "ops/normalize.h"

#include "ops/backend.h"

namespace stoke::ops {

void normalize_u8_nhwc(const Tensor& images, const Tensor& out, const std::vector<float>& mean,
                       const std::vector<float>& std) {
  constexpr const char* kOp = "normalize";
  STOKE_CHECK(images.defined() && out.defined(), kOp, "expected defined tensors");
  STOKE_CHECK(images.device() == out.device(), kOp,
              "expected images and out on the same device, got images on ", images.device(),
              " and out on ", out.device());
  STOKE_CHECK(images.dtype() == DType::u8, kOp, "expected u8 images, got ", images.dtype());
  STOKE_CHECK(images.dim() == 4, kOp, "expected images of shape (N, H, W, C), got ",
              images.shape());
  STOKE_CHECK(images.is_contiguous(), kOp, "expected contiguous images");
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  STOKE_CHECK(out.dtype() == DType::f32 || out.dtype() == DType::f16, kOp,
              "expected an f32 or f16 output, got ", out.dtype());
  STOKE_CHECK(out.shape() == Shape({n, c, h, w}) && out.is_contiguous(), kOp,
              "expected a contiguous output of shape ", Shape({n, c, h, w}), ", got ", out.shape());
  const auto per_channel = [&](const std::vector<float>& v, const char* what) {
    STOKE_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == c, kOp, "expected 1 or ", c, " ",
                what, " values (one per channel), got ", v.size());
  };
  per_channel(mean, "mean");
  per_channel(std, "std");
  // The backends take mean/std per channel (each folds them into its scale and bias).
  std::vector<float> mean_c(static_cast<size_t>(c)), std_c(static_cast<size_t>(c));
  for (size_t ch = 0; ch < static_cast<size_t>(c); ++ch) {
    mean_c[ch] = mean[mean.size() == 1 ? 0 : ch];
    std_c[ch] = std[std.size() == 1 ? 0 : ch];
    STOKE_CHECK(std_c[ch] != 0.f, kOp, "expected std != 0, got 0 for channel ", ch);
  }
  if (n == 0 || h == 0 || w == 0 || c == 0) return;
  dispatch(kOp, {&images, &out}).normalize_u8_nhwc(images, out, mean_c, std_c);
}

}  // namespace stoke::ops
