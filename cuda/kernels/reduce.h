// CUDA reductions over one dim of a contiguous tensor viewed as [outer, n, inner] (the reduced dim
// is n): sum, mean, max, min, and the positions of the first max/min (argmax/argmin). f32, f16 and
// bf16 inputs accumulate in f32. Several dims reduce in several calls (or one call, when they are
// adjacent: merge them into n); all dims is outer = inner = 1.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// What to reduce. max/min follow ops::max_with_indices: NaN wins over numbers and the first
// extremum (lowest position) wins ties.
enum class ReduceOp : uint8_t { sum, mean, max, min };

// Reduces x ([outer, n, inner], contiguous, `dtype`) over n into out ([outer, inner], `dtype`)
// and, for max/min, the i64 positions along n into indices. Either output may be null (argmax
// needs only indices). sum over n == 0 gives 0 and mean NaN; max/min need n > 0.
// inner == 1 reduces contiguous rows: one warp per row for short rows, one block per row for long
// ones, shuffles within warps. inner > 1 reduces columns: a 32-wide tile of columns per block, its
// 8 thread rows splitting n, combined through shared memory.
void reduce(ReduceOp op, DType dtype, const void* x, void* out, int64_t* indices, int64_t outer,
            int64_t n, int64_t inner, cudaStream_t stream);

}  // namespace stoke::cuda
