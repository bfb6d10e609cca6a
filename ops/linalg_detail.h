// Internal helper of the linalg family, shared by the backends' matmul_backward
// (ops/cpu/linalg.cpp, ops/cuda/linalg.cpp): each checks its dtypes first (the CPU its float
// dtypes, before the shapes as always), then the shapes here.
#pragma once

#include "core/tensor.h"

namespace stoke::ops::linalg_detail {

// Checks that a and b have at least 2 dims and that grad_out has the shape of their product (the
// batch dims broadcast); returns that shape.
Shape matmul_backward_shape(const Tensor& grad_out, const Tensor& a, const Tensor& b);

}  // namespace stoke::ops::linalg_detail
