// Small helpers shared by several files of the CUDA glue (ops/cuda/); the shared declarations
// every glue file uses are in ops/cuda/backend.h.
#pragma once

#include "core/dtype.h"

namespace stoke::ops::cuda_glue {

// Integer tensors (i32, i64, u8) take cuda/kernels/elementwise_integer.h; the floating ones
// elementwise.h.
inline bool is_integer(DType d) {
  return d == DType::i32 || d == DType::i64 || d == DType::u8;
}

}  // namespace stoke::ops::cuda_glue
