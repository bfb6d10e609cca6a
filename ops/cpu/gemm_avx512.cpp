// stoke's own single-threaded f32 GEMM for AVX-512 CPUs (declared in gemm.h), written for the
// convolutions' per-chunk products (Winograd's 16 per block, the small-plane and im2col paths'):
// a few hundred rows, 32-512 columns and depth, operands that fit in L2.
//
// Why not OpenBLAS: where OpenBLAS runs AVX2 kernels on an AVX-512 CPU (OPENBLAS_CORETYPE=Haswell
// on a Zen 5 EPYC, or a CPU it does not know), its GEMM reaches half the FMA rate of this CPU's
// 512-bit units; docs/design-notes.md has the measurements.
//
// Register tile: up to kTileRows rows of C by 32 columns (two vectors), 24 accumulators. Per step
// of the depth: two vector loads of B's row, one broadcast of A per row, two FMAs per row. Columns
// past n are masked; rows past m take a smaller tile (one instantiation per row count). Loop
// order: 32-column panels of B outside, row tiles inside, so a panel stays in L1/L2 while every
// row tile streams past it.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "ops/cpu/gemm.h"

namespace stoke::ops::cpu {
namespace {

// AVX-512 whatever -march the file is built for (callers check the CPU at run time), and not
// instrumented by AddressSanitizer: GCC 12's ASan places 64-byte vector temporaries misaligned in
// its fake stack frames (as for conv2d_direct.cpp's kernels). The callers, which own every buffer
// the tiles touch, stay instrumented.
#define STOKE_GEMM_KERNEL __attribute__((target("avx512f"), no_sanitize_address))

constexpr int kTileRows = 12;
constexpr int64_t kTileCols = 32;
constexpr int64_t kRowBlock = 12 * kTileRows;
constexpr int64_t kDepthBlock = 256;

template <int R>
STOKE_GEMM_KERNEL void gemm_tile(int64_t depth, const float* a, int64_t a_row, int64_t a_col,
                                 const float* b, int64_t ldb, float* c, int64_t ldc, __mmask16 m0,
                                 __mmask16 m1, bool accumulate) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    acc0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc1[r] = accumulate ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < depth; ++p) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + p * ldb);
    const __m512 b1 = _mm512_maskz_loadu_ps(m1, b + p * ldb + 16);
    const float* ap = a + p * a_col;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * a_row]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc1[r]);
  }
}

using GemmTileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*,
                            int64_t, __mmask16, __mmask16, bool);

template <int... R>
constexpr auto make_tiles(std::integer_sequence<int, R...>) {
  return std::array<GemmTileFn, sizeof...(R)>{&gemm_tile<R + 1>...};
}

// tiles[r - 1] computes r rows.
constexpr auto kTiles = make_tiles(std::make_integer_sequence<int, kTileRows>{});

__mmask16 column_mask(int64_t cols) {
  return cols >= 16 ? __mmask16(0xFFFF) : cols <= 0 ? __mmask16(0) : __mmask16((1u << cols) - 1);
}

}  // namespace

bool gemm_avx512_available() {
  static const bool on = __builtin_cpu_supports("avx512f") != 0;
  return on;
}

bool gemm_fastest_runs_avx512() {
  static const bool own = gemm_avx512_available() && !gemm_kernels_avx512();
  return own;
}

void gemm_avx512(int64_t m, int64_t n, int64_t depth, const float* a, int64_t a_row, int64_t a_col,
                 const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  if (depth <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  // Blocks of kRowBlock rows by kDepthBlock of the depth: A's block (144 KB) stays in L2 while
  // every 32-column panel of B's block (32 KB) passes it, so a large product (matmul's n = 2048)
  // reads A once and B once per row block instead of A once per panel.
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    const int64_t r1 = std::min(m, r0 + kRowBlock);
    for (int64_t p0 = 0; p0 < depth; p0 += kDepthBlock) {
      const int64_t steps = std::min(kDepthBlock, depth - p0);
      const bool acc = accumulate || p0 > 0;
      const float* ab = a + p0 * a_col;
      const float* bb = b + p0 * ldb;
      for (int64_t j0 = 0; j0 < n; j0 += kTileCols) {
        const __mmask16 m0 = column_mask(n - j0), m1 = column_mask(n - j0 - 16);
        for (int64_t i0 = r0; i0 < r1; i0 += kTileRows) {
          const int64_t rows = std::min<int64_t>(kTileRows, r1 - i0);
          kTiles[rows - 1](steps, ab + i0 * a_row, a_row, a_col, bb + j0, ldb, c + i0 * ldc + j0,
                           ldc, m0, m1, acc);
        }
      }
    }
  }
}

namespace {

template <class T>
void openblas_product(int64_t m, int64_t n, int64_t depth, const T* a, int64_t a_row, int64_t a_col,
                      const T* b, int64_t ldb, bool accumulate, T* c, int64_t ldc) {
  const bool trans_a = a_col != 1;
  gemm(trans_a, false, m, n, depth, T(1), a, trans_a ? a_col : a_row, b, ldb,
       accumulate ? T(1) : T(0), c, ldc);
}

}  // namespace

void gemm_fastest(int64_t m, int64_t n, int64_t depth, const float* a, int64_t a_row, int64_t a_col,
                  const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  if (gemm_fastest_runs_avx512())
    return gemm_avx512(m, n, depth, a, a_row, a_col, b, ldb, accumulate, c, ldc);
  openblas_product(m, n, depth, a, a_row, a_col, b, ldb, accumulate, c, ldc);
}

void gemm_fastest(int64_t m, int64_t n, int64_t depth, const double* a, int64_t a_row,
                  int64_t a_col, const double* b, int64_t ldb, bool accumulate, double* c,
                  int64_t ldc) {
  openblas_product(m, n, depth, a, a_row, a_col, b, ldb, accumulate, c, ldc);
}

}  // namespace stoke::ops::cpu
