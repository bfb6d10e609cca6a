// CUDA integer arithmetic: the elementwise ops of ops/elementwise.h on i32, i64 and u8 tensors
// (add, sub, mul, maximum, minimum with broadcasting, tensor-scalar forms, in place through an
// aliased output), and sums of integer or bool tensors into i64, as the CPU computes them (exact,
// wrapping like the CPU's two's-complement arithmetic). The floating kernels of elementwise.h go
// through f32 and cannot hold an i64 exactly, hence these.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"
#include "cuda/kernels/elementwise.h"

namespace stoke::cuda {

// out (offsets[0]) = a (offsets[1]) op alpha * b (offsets[2]) (alpha for add/sub only; 1
// otherwise), dtype i32, i64 or u8. div is not an integer op (ops::div takes floats).
void int_binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out,
                const BinaryOffsets& offsets, int64_t n, int64_t alpha, cudaStream_t stream);

// out[i] = x[i] op s (or s op x[i] with scalar_first) for n contiguous elements.
void int_binary_scalar(BinaryOp op, DType dtype, const void* x, int64_t s, void* out, int64_t n,
                       bool scalar_first, cudaStream_t stream);

// out [outer, inner] (i64) = the sum over n of x [outer, n, inner] (contiguous; dtype i32, i64,
// u8 or bool). One block per output, its threads striding over n, combined in shared memory.
void int_sum(DType dtype, const void* x, int64_t* out, int64_t outer, int64_t n, int64_t inner,
             cudaStream_t stream);

}  // namespace stoke::cuda
