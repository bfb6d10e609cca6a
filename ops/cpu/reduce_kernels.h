// CPU kernels of the reductions that have no ops::Backend method (ops/backend_methods.h): var,
// the backward of mean and var, and the scatter of max/min's backward. Other devices compose these
// ops from their methods (ops/reduce.cpp); the CPU keeps its own kernels, which are faster and, for
// var, more accurate (two passes accumulated in f64). Internal header of ops/reduce.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke::ops::cpu {

// var of detached x over the dims in `mask` (reduce_detail::reduce_mask), correction >= 0.
Tensor var(const Tensor& x, const std::vector<bool>& mask, int64_t correction, bool keepdim);
// g (grad with the reduced dims kept) * scale * (x - mean(x, dims)).
Tensor var_backward(const Tensor& g, const Tensor& x, const std::vector<int64_t>& dims,
                    double scale);
// sum_backward scaled by 1 / count.
Tensor mean_backward(const Tensor& grad, const Shape& input_shape, const std::vector<int64_t>& dims,
                     bool keepdim, int64_t count);
// Zeros of input_shape with grad written at `indices` (i64) along dim.
Tensor index_reduce_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape,
                             int64_t dim, bool keepdim);

}  // namespace stoke::ops::cpu
