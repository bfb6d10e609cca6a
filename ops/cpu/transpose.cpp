// Out-of-place transpose (ops/cpu/transpose.h). A 16 x 16 block of f32 is 16 vector loads, four
// rounds of in-register shuffles (32-bit, 64-bit and twice 128-bit interleaves), and 16 vector
// stores; blocks at the edges load and store under masks.
#include "ops/cpu/transpose.h"

#include <immintrin.h>

#include <algorithm>

namespace stoke::ops::cpu {
namespace {

// AVX-512 whatever -march the file is built for (transpose checks the CPU at run time), and not
// instrumented by AddressSanitizer: GCC 12's ASan misaligns 64-byte vector temporaries in its
// fake stack frames (as for gemm_avx512.cpp's kernels).
#define STOKE_TRANSPOSE_KERNEL __attribute__((target("avx512f"), no_sanitize_address))

constexpr int64_t kTransposeBlock = 16;

__mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// GCC 12's AVX-512 shuffle intrinsics start from _mm512_undefined_ps(), which GCC then reports as
// "(may be) used uninitialized" (-O3; -O1 with the sanitizers): a false positive, every lane is
// written.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// r[j] <- column j of the 16 x 16 matrix whose row i is r[i].
STOKE_TRANSPOSE_KERNEL inline void transpose_registers(__m512 r[16]) {
  __m512 t[16];
  // 32-bit interleave of row pairs: t[2k], t[2k+1] hold rows 2k, 2k+1 alternating, per 128-bit
  // lane.
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  // 64-bit interleave of those pairs: each 128-bit lane of r[4q + m] holds column m of rows
  // 4q..4q+3 (for that lane's four columns).
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 2]), d = _mm512_castps_pd(t[4 * q + 3]);
    r[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // 128-bit lanes: gather lanes 0 and 2 (0x88), 1 and 3 (0xdd) of row groups q and q + 1...
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    t[m] = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
    t[4 + m] = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xdd);
    t[8 + m] = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
    t[12 + m] = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xdd);
  }
  // ... and again across the two halves of the rows.
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    r[m] = _mm512_shuffle_f32x4(t[m], t[8 + m], 0x88);
    r[4 + m] = _mm512_shuffle_f32x4(t[4 + m], t[12 + m], 0x88);
    r[8 + m] = _mm512_shuffle_f32x4(t[m], t[8 + m], 0xdd);
    r[12 + m] = _mm512_shuffle_f32x4(t[4 + m], t[12 + m], 0xdd);
  }
}

// One block of up to 16 x 16. Whole blocks load and store without masks: on Zen 5 a masked
// access with lanes masked off is far slower than a plain one (perf: 70% of a row copy's time on
// its masked load), and a 1-row block stored 16 single-lane masked stores.
STOKE_TRANSPOSE_KERNEL void transpose_block(const float* src, int64_t rows, int64_t cols,
                                            int64_t ld_src, float* dst, int64_t ld_dst) {
  __m512 r[16];
  if (rows == 16 && cols == 16) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld_src);
    transpose_registers(r);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + j * ld_dst, r[j]);
    return;
  }
  const __mmask16 load = first_lanes(cols), store = first_lanes(rows);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(load, src + i * ld_src) : _mm512_setzero_ps();
  transpose_registers(r);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j)
    if (j < cols) _mm512_mask_storeu_ps(dst + j * ld_dst, store, r[j]);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <class T>
void transpose_scalar(const T* src, int64_t rows, int64_t cols, int64_t ld_src, T* dst,
                      int64_t ld_dst) {
  for (int64_t i0 = 0; i0 < rows; i0 += kTransposeBlock)
    for (int64_t j0 = 0; j0 < cols; j0 += kTransposeBlock) {
      const int64_t i1 = std::min(rows, i0 + kTransposeBlock),
                    j1 = std::min(cols, j0 + kTransposeBlock);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i) dst[j * ld_dst + i] = src[i * ld_src + j];
    }
}

bool transpose_avx512() {
  static const bool on = __builtin_cpu_supports("avx512f") != 0;
  return on;
}

}  // namespace

void transpose(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
               int64_t ld_dst) {
  // One row or one column: a strided copy (no blocks of 1 x 16).
  if (rows == 1 || cols == 1 || !transpose_avx512())
    return transpose_scalar(src, rows, cols, ld_src, dst, ld_dst);
  for (int64_t i0 = 0; i0 < rows; i0 += kTransposeBlock)
    for (int64_t j0 = 0; j0 < cols; j0 += kTransposeBlock)
      transpose_block(src + i0 * ld_src + j0, std::min(kTransposeBlock, rows - i0),
                      std::min(kTransposeBlock, cols - j0), ld_src, dst + j0 * ld_dst + i0, ld_dst);
}

void transpose(const double* src, int64_t rows, int64_t cols, int64_t ld_src, double* dst,
               int64_t ld_dst) {
  transpose_scalar(src, rows, cols, ld_src, dst, ld_dst);
}

}  // namespace stoke::ops::cpu
