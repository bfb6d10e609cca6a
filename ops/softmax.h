// softmax and log_softmax along one dim, without autograd, and their backward kernels.
// Numerically stable: the maximum along `dim` is subtracted before exponentiating, so large
// logits neither overflow nor lose precision.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace stoke::ops {

// exp(x - max) / sum(exp(x - max)) along `dim` (f32/f64; any dim, negative wraps).
Tensor softmax(const Tensor& x, int64_t dim);
// x - max - log(sum(exp(x - max))) along `dim`.
Tensor log_softmax(const Tensor& x, int64_t dim);

// Gradient of softmax given its output y: y * (grad - sum(grad * y)) along `dim`.
Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim);
// Gradient of log_softmax given its output y: grad - exp(y) * sum(grad) along `dim`.
Tensor log_softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim);

}  // namespace stoke::ops
