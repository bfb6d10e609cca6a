// CUDA reductions over one dim of a contiguous tensor viewed as [outer, n, inner] (the reduced dim
// is n): sum, mean, max, min, and the positions of the first max/min (argmax/argmin). f32, f16 and
// bf16 inputs accumulate in f32. Several dims reduce in several calls (or one call, when they are
// adjacent: merge them into n); all dims is outer = inner = 1.
#pragma once

#include <cstddef>
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
// A few long rows (fewer than 64 rows of 32768 elements or more, inner == 1: a whole tensor) take
// two stages: up to 1024 blocks per row reduce slices to partials in `workspace`, then one block
// per row combines them in a fixed order (results are reproducible for a given shape).
// `workspace` must hold reduce_workspace_bytes(outer, n, inner) bytes (may be null when that is
// 0), 8-byte aligned, and stay untouched until the launch has run (stream order).
void reduce(ReduceOp op, DType dtype, const void* x, void* out, int64_t* indices, int64_t outer,
            int64_t n, int64_t inner, void* workspace, cudaStream_t stream);

// Bytes of workspace reduce() needs for [outer, n, inner] (0 for the one-stage paths).
size_t reduce_workspace_bytes(int64_t outer, int64_t n, int64_t inner);

}  // namespace stoke::cuda
