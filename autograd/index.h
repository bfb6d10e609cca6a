// Differentiable index and shape functions: cat, stack, index_select, embedding and gather, with
// scatter-add backward (repeated indices accumulate). one_hot is re-exported (not differentiable;
// documented in ops/index.h). Index tensors are i64; every index value is bounds-checked and a
// bad one is reported with the op, its position, its value and the size it indexes. The forwards
// copy elements of any dtype; the gradients are f32/f64.
#pragma once

#include <vector>

#include "ops/index.h"

namespace stoke {

// Concatenates tensors of one dtype along `dim`; all other dims must match. Each input gets its
// slice of the gradient.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Stacks tensors of one shape along a new dim `dim` (in [-ndim-1, ndim]).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Entries of x along `dim` at the positions in `index` (1-D or 0-D i64), like
// torch.index_select: the result has x's shape with size(dim) replaced by index.numel(). The
// gradient flows to x only.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// Rows of weight (V, D) at `indices` (i64, any shape) -> indices.shape + [D]; gradient flows to
// weight only, scatter-added per row.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] for dim = 1. index (i64) has x's number
// of dims and index.size(d) <= x.size(d) for d != dim; the result has index's shape. The gradient
// flows to x only.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

using ops::one_hot;

}  // namespace stoke
