// Differentiable matrix products: stoke::matmul (torch.matmul semantics, batch dims broadcast)
// and stoke::linear (x·Wᵀ + b). Forward and backward run on the ops/linalg kernels.
#pragma once

#include "ops/linalg.h"

namespace stoke {

// Matrix product with torch.matmul's rules: 1-D x 1-D is a dot product (0-dim result); 2-D x 2-D
// is a matrix product; a 1-D operand gets a dim of size 1 prepended (left) or appended (right),
// removed again from the result; operands with more than 2 dims are stacks of matrices whose
// batch dims broadcast. f32 or f64, both operands the same dtype.
Tensor matmul(const Tensor& a, const Tensor& b);

// y = x·Wᵀ + b for x (..., in), weight (out, in) and an optional bias (out) (undefined: none);
// y has shape (..., out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace stoke
