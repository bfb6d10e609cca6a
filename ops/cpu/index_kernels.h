// CPU kernel of the index op that has no ops::Backend method (ops/backend_methods.h): one_hot.
// Other devices compose it from comparisons (ops/index.cpp). Internal header of ops/index.cpp.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace stoke::ops::cpu {

// i64 tensor of `shape` + [num_classes] with a 1 at each value of idx (contiguous i64, values
// checked to lie in [0, num_classes)).
Tensor one_hot(const Tensor& idx, const Shape& shape, int64_t num_classes);

}  // namespace stoke::ops::cpu
