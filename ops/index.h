// Index and shape operations without autograd: cat, stack, index_select, embedding lookup,
// gather, one_hot, and the scatter-add kernels that are their backward. Index tensors are i64;
// every index value is bounds-checked and a bad one is reported with the op, its position, its
// value and the size it indexes. Forward ops copy elements of any dtype; backward kernels are
// f32/f64.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace stoke::ops {

// Concatenates tensors of one dtype along `dim`; all other dims must match.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Stacks tensors of one shape along a new dim `dim` (in [-ndim-1, ndim]).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Entries of x along `dim` at the positions in `index` (1-D or 0-D i64), like
// torch.index_select: the result has x's shape with size(dim) replaced by index.numel().
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// Backward of index_select: zeros of `input_shape` with grad's slices added at `index` along
// `dim` (repeated indices accumulate).
Tensor index_select_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                             const Shape& input_shape);

// Rows of weight (V, D) at `indices` (i64, any shape): the result has shape indices.shape + [D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Backward of embedding: a (num_weights, D) gradient, grad rows scatter-added at `indices`.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights);

// torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] for dim = 1. index (i64) has x's number
// of dims and index.size(d) <= x.size(d) for d != dim; the result has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Backward of gather: zeros of `input_shape` with grad scatter-added at `index` along `dim`.
Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                       const Shape& input_shape);

// i64 tensor of shape indices.shape + [num_classes] with a 1 at each index. num_classes = -1
// uses max(indices) + 1. Values outside [0, num_classes) are an error.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace stoke::ops
