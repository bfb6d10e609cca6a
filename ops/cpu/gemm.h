// Dense matrix multiply on the CPU: row-major GEMM with cblas semantics, backed by OpenBLAS, or
// for f32 by stoke's own AVX-512 kernel where the CPU has AVX-512 but OpenBLAS runs narrower
// kernels (gemm_fastest_runs_avx512; alpha 1, beta 0 or 1, at least 24 x 32 x 16).
//
// The project's thread pool owns the cores (docs/design-notes.md), so OpenBLAS is switched to one
// thread the first time gemm runs, and large products are split over stoke::parallel_for here
// instead: each chunk is one single-threaded call on a block of rows (or columns) of C.
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

// Whether OpenBLAS runs its AVX-512 kernels (SkylakeX, Cooperlake, SapphireRapids) for these
// products; false where it cannot say. On an AVX-512 CPU whose OpenBLAS runs AVX2 kernels (chosen
// by OPENBLAS_CORETYPE, say) a GEMM reaches about half the FMA rate of the CPU (gemm_fastest).
bool gemm_kernels_avx512();

// stoke's own single-threaded f32 GEMM for AVX-512 CPUs (ops/cpu/gemm_avx512.cpp), for the
// convolutions' products where OpenBLAS runs narrower kernels: C (m, n) = A · B, or
// C += A · B when accumulate; A's element (i, p) lies at a[i * a_row + p * a_col] (row-major A:
// a_row = lda, a_col = 1; transposed: a_row = 1, a_col = lda); B (depth, n) and C row-major.
// Callers check gemm_avx512_available() (the CPU has AVX-512F) first.
bool gemm_avx512_available();
void gemm_avx512(int64_t m, int64_t n, int64_t depth, const float* a, int64_t a_row, int64_t a_col,
                 const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc);

// C (m, n) = A · B, or C += A · B when accumulate, A's element (i, p) at a[i * a_row + p * a_col]
// with a_row or a_col 1, B (depth, n) and C row-major, single-threaded: gemm_avx512 where the CPU
// has AVX-512F and OpenBLAS runs narrower kernels (VGG-11's Winograd layers 1.3-1.7x faster end to
// end with it there, docs/design-notes.md), OpenBLAS otherwise (always for f64).
// Whether gemm_fastest's f32 overload runs gemm_avx512 (decided once per process).
bool gemm_fastest_runs_avx512();
void gemm_fastest(int64_t m, int64_t n, int64_t depth, const float* a, int64_t a_row, int64_t a_col,
                  const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc);
void gemm_fastest(int64_t m, int64_t n, int64_t depth, const double* a, int64_t a_row,
                  int64_t a_col, const double* b, int64_t ldb, bool accumulate, double* c,
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
