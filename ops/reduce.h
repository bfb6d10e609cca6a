// The kernels behind the differentiable reductions of stoke:: (autograd/reduce.h, documented
// there: `dims`, keepdim, dtypes, accuracy): ops::sum, mean, var, max, min, max_with_indices and
// min_with_indices take the same arguments and compute the same results without recording
// autograd. Documented here is what only ops:: has: argmax/argmin (stoke:: re-exports them), the
// flat-index forms over all elements, and the backward kernels autograd/reduce.cpp composes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke::ops {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);

// Values and i64 positions of extrema (max_with_indices, max_all_with_index, ...).
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);

Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
// Positions (i64) of the first maximum / minimum along `dim`.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
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
