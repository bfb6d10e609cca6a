// CPU pooling entry that has no backend method (internal to ops/).
#pragma once

#include "core/tensor.h"
#include "ops/pool.h"

namespace stoke::ops::cpu {

// max_pool2d of a CPU tensor without the indices: ops::max_pool2d calls it for CPU tensors, since
// skipping the argmax bookkeeping makes the CPU kernel faster (the backend method,
// max_pool2d_with_indices, always computes them; other devices compute them and drop them).
Tensor max_pool2d_no_indices(const Tensor& input, const Pool2dOptions& options);

}  // namespace stoke::ops::cpu
