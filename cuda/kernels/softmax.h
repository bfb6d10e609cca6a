// CUDA softmax / log_softmax over one dim and their backward kernels, for a contiguous tensor
// viewed as [outer, n, inner] (the softmax dim is n). f32, f16 and bf16 with f32 math. Stable: the
// row maximum is subtracted before exponentiating, as in ops::softmax.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// y = softmax(x) (or log_softmax with log) along n. inner == 1 (the last dim): one warp per row
// when n <= 1024, one block per row otherwise; inner > 1: one thread per (outer, inner) column,
// coalesced across columns.
void softmax_forward(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                     bool log, cudaStream_t stream);

// dx from the forward's output y and the incoming grad: y * (grad - sum(grad * y)) for softmax,
// grad - exp(y) * sum(grad) for log_softmax (ops::softmax_backward / log_softmax_backward).
// dx may alias grad.
void softmax_backward(DType dtype, const void* grad, const void* y, void* dx, int64_t outer,
                      int64_t n, int64_t inner, bool log, cudaStream_t stream);

}  // namespace stoke::cuda
