// Internal helpers of the reductions, shared by the entry points (ops/reduce.cpp) and the CPU
// kernels (ops/cpu/reduce.cpp): which dims a reduction covers and the shapes around it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke::ops::reduce_detail {

// `t`'s elements as a contiguous tensor of `shape` (same numel). Unlike Tensor::reshape this also
// accepts 0-dim tensors, whose view strides core does not compute.
Tensor reshaped(const Tensor& t, const Shape& shape);
// Which of `ndim` dims `dims` reduces (all when empty; negative dims wrap; a repeat is an error).
std::vector<bool> reduce_mask(int64_t ndim, const std::vector<int64_t>& dims, const char* op);
// `shape` without the masked dims (size 1 with keepdim).
Shape shape_after(const Shape& shape, const std::vector<bool>& mask, bool keepdim);
// The number of elements each output reduces.
int64_t reduced_count(const Shape& shape, const std::vector<bool>& mask);
// grad viewed with the reduced dims kept as size 1, after checking its shape.
Tensor grad_keepdim(const Tensor& grad, const Shape& input_shape, const std::vector<bool>& mask,
                    bool keepdim, const char* op);

}  // namespace stoke::ops::reduce_detail
