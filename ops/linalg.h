// The kernels behind stoke::matmul and stoke::linear (autograd/linalg.h, documented there):
// ops::matmul and ops::linear take the same arguments and compute the same results without
// recording autograd. Documented here is what only ops:: has: the backward kernels. On the CPU
// all run on ops/cpu/gemm; transposed views are handed to GEMM through its transpose flags rather
// than copied.
#pragma once

#include "core/tensor.h"

namespace stoke::ops {

Tensor matmul(const Tensor& a, const Tensor& b);

// Gradients of matmul for operands with at least 2 dims (callers unsqueeze 1-D operands):
// grad_a = g·bᵀ and grad_b = aᵀ·g, summed over the batch dims each operand was broadcast along,
// so each has its operand's shape. Only the requested ones are computed (others undefined).
struct MatmulGrads {
  Tensor grad_a, grad_b;
};
MatmulGrads matmul_backward(const Tensor& grad_out, const Tensor& a, const Tensor& b, bool need_a,
                            bool need_b);

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Gradients of linear: grad_x = g·W (x's shape), grad_weight = gᵀ·x, grad_bias = the sum of g
// over all leading dims. Only the requested ones are computed (others undefined).
struct LinearGrads {
  Tensor grad_input, grad_weight, grad_bias;
};
LinearGrads linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                            bool need_input, bool need_weight, bool need_bias);

// Sums g (..., n) over every dim but the last: the bias gradient of linear. Deterministic.
Tensor sum_leading_dims(const Tensor& g);

}  // namespace stoke::ops
