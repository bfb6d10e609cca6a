// Differentiable index and shape functions: cat, stack, index_select, embedding and gather, with
// scatter-add backward (repeated indices accumulate). one_hot is re-exported (not differentiable).
#pragma once

#include <vector>

#include "ops/index.h"

namespace stoke {

// Concatenation along `dim`; each input gets its slice of the gradient.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Stacking along a new dim `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// x's entries along `dim` at `index` (1-D i64); gradient flows to x only.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// Rows of weight (V, D) at `indices` (i64, any shape) -> indices.shape + [D]; gradient flows to
// weight only, scatter-added per row.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// torch.gather along `dim`; gradient flows to x only.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

using ops::one_hot;

}  // namespace stoke
