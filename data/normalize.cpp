#include "data/normalize.h"

#include "core/error.h"
#include "ops/normalize.h"

namespace stoke::data {

namespace {

constexpr const char* kOp = "normalize";

}  // namespace

void normalize_into(const Tensor& images, const Tensor& out, const NormalizeOptions& options) {
  // The checks and the kernels (CPU, cuda) are the op's: ops/normalize.h.
  ops::normalize_u8_nhwc(images, out, options.mean, options.std);
}

Tensor normalize(const Tensor& images, const NormalizeOptions& options) {
  STOKE_CHECK(images.defined() && images.dim() == 4, kOp,
              "expected images of shape (N, H, W, C), got ",
              images.defined() ? images.shape() : Shape{});
  STOKE_CHECK(options.dtype == DType::f32 || options.dtype == DType::f16, kOp,
              "expected dtype f32 or f16, got ", options.dtype);
  Tensor out = empty({images.size(0), images.size(3), images.size(1), images.size(2)},
                     {.dtype = options.dtype, .device = images.device()});
  normalize_into(images, out, options);
  return out;
}

}  // namespace stoke::data
