// CUDA comparisons and selection: eq/ne/lt/le/gt/ge with NumPy broadcasting (any strides, up to
// kMaxDims dims after merging) producing bool (one byte, 0 or 1), tensor-scalar comparisons, and
// where(cond, a, b) (and select_or_zero, where's backward). Comparisons take every dtype (f32, f16,
// bf16, f64, i32, i64, u8, bool) and compare in the operands' own type (half types through f32,
// exactly); NaN compares false except for ne, as in IEEE and torch. where moves elements by size,
// so it takes every dtype as well.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/elementwise_ops.h"
#include "cuda/compat.h"
#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {

enum class CompareOp : uint8_t { STOKE_COMPARE_OPS(STOKE_ENUMERATOR) };

// out (bool, offsets[0]) = a (offsets[1]) op b (offsets[2]) over n positions of the broadcast
// shape; a and b share `dtype`. Offsets from make_strided_offsets<3> over (out, a, b).
void compare(CompareOp op, DType dtype, const void* a, const void* b, bool* out,
             const StridedOffsets<3>& offsets, int64_t n, cudaStream_t stream);

// out[i] = x[i] op s for n contiguous elements; the element is widened to double to compare.
void compare_scalar(CompareOp op, DType dtype, const void* x, double s, bool* out, int64_t n,
                    cudaStream_t stream);

// out (offsets[0]) = cond (offsets[1]) ? a (offsets[2]) : b (offsets[3]); elements of
// `element_size` bytes (1, 2, 4 or 8). Offsets from make_strided_offsets<4>.
void where(const bool* cond, const void* a, const void* b, void* out, size_t element_size,
           const StridedOffsets<4>& offsets, int64_t n, cudaStream_t stream);

// out (offsets[0]) = cond (offsets[2]) == keep ? value (offsets[1]) : 0, the zero being all-zero
// bits (0 in every dtype): ops::where_backward in one launch, NaN/inf in the dropped gradient
// giving 0 as on the CPU. Offsets from make_strided_offsets<3> over (out, value, cond).
void select_or_zero(const bool* cond, bool keep, const void* value, void* out, size_t element_size,
                    const StridedOffsets<3>& offsets, int64_t n, cudaStream_t stream);

}  // namespace stoke::cuda
