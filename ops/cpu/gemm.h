// Dense matrix multiply on the CPU: row-major GEMM with cblas semantics, backed by OpenBLAS.
//
// The project's thread pool owns the cores (docs/design-notes.md), so OpenBLAS is switched to one
// thread the first time gemm runs, and large products are split over stoke::parallel_for here
// instead: each chunk is one single-threaded OpenBLAS call on a block of rows (or columns) of C.
// Inside a parallel region (e.g. conv2d's per-sample loop) gemm is always a single call.
#pragma once

#include <cstdint>

namespace stoke::ops::cpu {

// C = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k, op(B) is k x n, C is m x n.
// lda/ldb/ldc are the row strides of the stored (untransposed) matrices, as in cblas. When
// beta == 0, C is not read (it may hold NaNs).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The f64 overload (gradcheck, reference computations).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

// Batched GEMM over `batch` independent products whose matrices lie a fixed number of elements
// apart (stride_a, stride_b, stride_c; 0 reuses one matrix for every batch entry). Small products
// are spread over the thread pool one batch entry per task; large ones run in order, each split
// by gemm. With stride_c == 0 every entry accumulates into the same C, in batch order (beta
// applies to the first entry only).
template <class T>
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                  int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c);

}  // namespace stoke::ops::cpu
