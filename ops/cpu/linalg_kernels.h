// CPU kernels of the linalg ops that have no ops::Backend method (ops/backend_methods.h):
// matmul_backward and sum_leading_dims. Other devices compose them from matmul and sum
// (ops/linalg.cpp); the CPU's own kernels read transposed operands in place and sum the broadcast
// batch dims inside GEMM. Internal header of ops/linalg.cpp.
#pragma once

#include "core/tensor.h"
#include "ops/linalg.h"

namespace stoke::ops::cpu {

// matmul_backward after the entry point's checks; `full` is the product's broadcast shape.
MatmulGrads matmul_backward(const Tensor& grad_out, const Tensor& a, const Tensor& b,
                            const Shape& full, bool need_a, bool need_b);
// sum_leading_dims of a CPU tensor (checks f32/f64 and at least 1 dim).
Tensor sum_leading_dims(const Tensor& g);

}  // namespace stoke::ops::cpu
