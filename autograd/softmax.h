// Differentiable softmax and log_softmax along one dim.
#pragma once

#include <cstdint>

#include "ops/softmax.h"

namespace stoke {

// exp(x) / sum(exp(x)) along `dim` (f32/f64; any dim, negative wraps), computed stably: the
// maximum along `dim` is subtracted before exponentiating, so large logits neither overflow nor
// lose precision.
Tensor softmax(const Tensor& x, int64_t dim);
// log(softmax(x)) along `dim`, computed as x - max - log(sum(exp(x - max))) (no log of a rounded
// probability).
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace stoke
