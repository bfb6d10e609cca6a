// Argument checks shared by all ops, so that every op reports bad input the same way:
// "stoke::<op>: expected ..., got ...".
#pragma once

#include "core/tensor.h"

namespace stoke::ops {

// a and b have the same dtype (no silent promotion); `what` names the operands ("input", "weight").
void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                      const char* b_name);
// t has `ndim` dims; `layout` describes them, e.g. "(N, C, H, W)".
void check_dim(const char* op, const Tensor& t, const char* name, int64_t ndim, const char* layout);
// t is f32 or f64 (the CPU compute dtypes).
void check_float(const char* op, const Tensor& t, const char* name);
// t has exactly `shape`.
void check_shape(const char* op, const Tensor& t, const char* name, const Shape& shape);
// The checks of an in-place target that every device shares: no autograd recording of a tensor
// that requires grad (torch: "a leaf Variable that requires grad is being used in an in-place
// operation"), and no element written twice (an expanded tensor). Entry points run it after
// dispatch (ops/backend.h) and before calling the backend's method.
void check_inplace_target(const char* op, const Tensor& t);
// `other` must broadcast to the in-place target's shape (the target cannot grow).
inline void check_broadcasts_to(const char* op, const Tensor& other, const Shape& target) {
  STOKE_CHECK(broadcast_shapes(other.shape(), target, op) == target, op, "operand of shape ",
              other.shape(), " cannot be broadcast to the in-place target's shape ", target);
}

}  // namespace stoke::ops
