// Differentiable matrix products: stoke::matmul (torch.matmul semantics, batch dims broadcast)
// and stoke::linear (x·Wᵀ + b). Forward and backward run on the ops/linalg kernels.
#pragma once

#include "ops/linalg.h"

namespace stoke {

// a·b with torch.matmul's rules for 1-D, 2-D and batched (broadcast) operands; see ops::matmul.
Tensor matmul(const Tensor& a, const Tensor& b);

// x (..., in) · weight (out, in)ᵀ + bias (out); bias may be undefined (no bias).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace stoke
