// The kernels behind stoke::softmax and stoke::log_softmax (autograd/softmax.h, documented
// there): ops::softmax and ops::log_softmax take the same arguments and compute the same results
// without recording autograd. Documented here is what only ops:: has: the backward kernels.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace stoke::ops {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Gradient of softmax given its output y: y * (grad - sum(grad * y)) along `dim`.
Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim);
// Gradient of log_softmax given its output y: grad - exp(y) * sum(grad) along `dim`.
Tensor log_softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim);

}  // namespace stoke::ops
