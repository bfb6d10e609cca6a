// Out-of-place matrix transpose for the CPU kernels' layout changes: the convolutions'
// channels-last copies and transposed grad_out, and the transposed operand of stoke's own GEMM.
// Internal to ops/cpu.
#pragma once

#include <cstdint>

namespace stoke::ops::cpu {

// dst (cols, rows) = src (rows, cols)ᵀ: dst[j * ld_dst + i] = src[i * ld_src + j]. The buffers
// must not overlap. f32 runs 16 x 16 blocks through AVX-512 registers where the CPU has AVX-512F
// (a strided scalar copy moved one value per cycle at best), scalar 16 x 16 blocks otherwise.
void transpose(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
               int64_t ld_dst);
void transpose(const double* src, int64_t rows, int64_t cols, int64_t ld_src, double* dst,
               int64_t ld_dst);

}  // namespace stoke::ops::cpu
