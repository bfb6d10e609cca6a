// Differentiable softmax and log_softmax along one dim (see ops/softmax.h).
#pragma once

#include <cstdint>

#include "ops/softmax.h"

namespace stoke {

// exp(x) / sum(exp(x)) along `dim`, computed stably.
Tensor softmax(const Tensor& x, int64_t dim);
// log(softmax(x)) along `dim`, computed as x - logsumexp(x) (no log of a rounded probability).
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace stoke
