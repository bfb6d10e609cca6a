#include "ops/check.h"

#include "core/grad_mode.h"

namespace stoke::ops {

void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                      const char* b_name) {
  STOKE_CHECK(a.dtype() == b.dtype(), op, "expected ", a_name, " and ", b_name,
              " of the same dtype, got ", a.dtype(), " and ", b.dtype(),
              " (no implicit promotion: cast one with .to())");
}

void check_dim(const char* op, const Tensor& t, const char* name, int64_t ndim,
               const char* layout) {
  STOKE_CHECK(t.dim() == ndim, op, "expected ", name, " with ", ndim, " dims ", layout,
              ", got shape ", t.shape());
}

void check_float(const char* op, const Tensor& t, const char* name) {
  STOKE_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, op, "expected ", name,
              " of dtype f32 or f64, got ", t.dtype(),
              " (f16/bf16 are storage types on the CPU: cast to f32 first)");
}

void check_shape(const char* op, const Tensor& t, const char* name, const Shape& shape) {
  STOKE_CHECK(t.shape() == shape, op, "expected ", name, " of shape ", shape, ", got ", t.shape());
}

void check_inplace_target(const char* op, const Tensor& t) {
  STOKE_CHECK(!(GradMode::is_enabled() && t.requires_grad()), op,
              "a tensor that requires grad is being used in an in-place operation; run it under "
              "NoGradGuard (optimizer steps) or on t.detach()");
  for (int64_t d = 0; d < t.dim(); ++d)
    STOKE_CHECK(!(t.stride(d) == 0 && t.size(d) > 1), op,
                "cannot write in place to an expanded tensor (shape ", t.shape(), ", strides ",
                t.strides(), "): more than one element refers to the same memory location");
}

}  // namespace stoke::ops
