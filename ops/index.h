// The kernels behind stoke::cat, stack, index_select, embedding and gather (autograd/index.h,
// documented there, index checks included): the ops:: functions of the same names take the same
// arguments and compute the same results without recording autograd. Documented here is what
// only ops:: has: one_hot (stoke:: re-exports it) and the scatter-add kernels that are the
// backwards (f32/f64).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace stoke::ops {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// Backward of index_select: zeros of `input_shape` with grad's slices added at `index` along
// `dim` (repeated indices accumulate).
Tensor index_select_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                             const Shape& input_shape);

Tensor embedding(const Tensor& weight, const Tensor& indices);
// Backward of embedding: a (num_weights, D) gradient, grad rows scatter-added at `indices`.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights);

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Backward of gather: zeros of `input_shape` with grad scatter-added at `index` along `dim`.
Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                       const Shape& input_shape);

// i64 tensor of shape indices.shape + [num_classes] with a 1 at each index. num_classes = -1
// uses max(indices) + 1. Values outside [0, num_classes) are an error.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace stoke::ops
