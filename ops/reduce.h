// Reductions without autograd: sum, mean, var over any set of dims; max/min/argmax/argmin over one
// dim or over all elements; and the backward kernels autograd/reduce.cpp composes.
//
// `dims` lists the dims to reduce: empty means all dims, negative dims wrap, a repeated dim is an
// error. With keepdim the reduced dims stay as size 1. f32 sums accumulate in f32 lanes over
// short blocks whose results are added in f64, so a sum of 1e6 values is accurate to ~1e-7.
// Results are deterministic for a given thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke::ops {

// Sum over `dims`. f32/f64 keep their dtype; integer inputs (i32, i64, u8) accumulate in and
// return i64, like torch.sum.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Arithmetic mean over `dims` (f32/f64).
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance over `dims` with divisor N - correction (1: Bessel's unbiased estimate, 0: biased),
// computed in two passes (mean, then squared deviations) for numerical stability.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);

// Values and i64 positions of the extremum along a dim; the first one wins ties, NaN wins over
// numbers (like PyTorch).
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);

// Maximum / minimum along `dim` (values only).
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
// Positions (i64) of the first maximum / minimum along `dim`.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Maximum / minimum over all elements, as a 0-dim tensor (error for an empty tensor).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// max()/min() with the flat (row-major) index of the first extremum, both 0-dim.
ValuesIndices max_all_with_index(const Tensor& x);
ValuesIndices min_all_with_index(const Tensor& x);
// Flat (row-major) index of the first maximum / minimum over all elements, as a 0-dim i64 tensor.
Tensor argmax(const Tensor& x);
Tensor argmin(const Tensor& x);

// --- backward kernels ------------------------------------------------------------------------

// The gradient of sum: `grad` (the reduced shape, keepdim or not) broadcast back to `input_shape`,
// materialized contiguously.
Tensor sum_backward(const Tensor& grad, const Shape& input_shape,
                    const std::vector<int64_t>& dims = {}, bool keepdim = false);
// The gradient of mean: sum_backward scaled by 1 / (number of reduced elements).
Tensor mean_backward(const Tensor& grad, const Shape& input_shape,
                     const std::vector<int64_t>& dims = {}, bool keepdim = false);
// The gradient of var: grad * 2 (x - mean) / (N - correction).
Tensor var_backward(const Tensor& grad, const Tensor& x, const std::vector<int64_t>& dims = {},
                    int64_t correction = 1, bool keepdim = false);
// The gradient of max/min along `dim`: zeros of `input_shape` with grad scattered to `indices`.
Tensor index_reduce_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape,
                             int64_t dim, bool keepdim = false);
// The gradient of max()/min() over all elements: zeros with the scalar grad at flat `index`.
Tensor flat_index_backward(const Tensor& grad, const Tensor& index, const Shape& input_shape);

// The reduced shape of `shape` over `dims` (wrapped, checked for repeats), as the reductions
// return it.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim,
                    const char* op);

}  // namespace stoke::ops
