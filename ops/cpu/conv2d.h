// The CPU kernel of conv2d's one op without a backend method (internal to ops/): the bias gradient,
// which other devices compose from their sum (ops/conv2d.cpp).
#pragma once

#include "core/tensor.h"

namespace stoke::ops::cpu {

// The sum of grad_out (N, K, OH, OW), a CPU tensor, over N, OH and OW: (K), one channel per task,
// the batch summed in order (deterministic). Checks the CPU dtypes; the entry point the rest.
Tensor conv2d_backward_bias(const Tensor& grad_out);

}  // namespace stoke::ops::cpu
