// Row kernels for thin f32 3x3 convolutions on CPUs with AVX-512 (ops/cpu/conv2d.cpp picks them;
// see conv2d_kernels.h): stride 1, one group, at most 7 input channels (fewer than 64
// multiply-adds per output: the stems of ResNet, VGG and MobileNet on 1- or 3-channel images).
//
// Why not the other kernels: a stem's output is most of its work (16-64 channels written per input
// value read), and the direct and channel-blocked kernels compute into a grid or a
// position-major buffer that a second pass copies or transposes into the (K, OH, OW) output. Here
// a register tile is 16 consecutive outputs of one output row for up to 16 output channels: per
// input channel the tile loads the 9 shifted input vectors once and adds 9 weight broadcasts
// (FMAs with an embedded broadcast) per output channel, then stores each channel's 16 outputs
// straight into the output. Rows of a width that is not a multiple of 16 end with a tile that
// overlaps the previous one (outputs recomputed, not masked); rows narrower than 16 use masked
// stores.
//
// Per task (a run of output rows of one sample): the input rows it reads are copied into a
// zero-padded buffer (C, rows + 2, ws) first, so that the tiles' loads need no bounds.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/parallel.h"
#include "ops/cpu/conv2d_kernels.h"
#include "ops/creation.h"

namespace stoke::ops::cpu {
namespace {

constexpr int64_t kThinLanes = 16;
constexpr int kThinMaxChannels = 16;  // output channels per tile: 16 accumulators + 9 inputs
constexpr int64_t kThinRowsPerTask = 4;

// As conv2d_direct.cpp's kernels: AVX-512 whatever -march the file is built for (the callers check
// the CPU at run time), not instrumented by AddressSanitizer (GCC 12's fake stack frames misalign
// 64-byte vector temporaries; docs/design-notes.md).
#define STOKE_THIN_KERNEL __attribute__((target("avx512f"), no_sanitize_address))

// out[k * ldo + l] (l < 16 where mask has bit l) = bias[k] + sum over c, i, j of
// w[(c * 9 + i * 3 + j) * 16 + k] * x[c * ldc + i * ws + j + l], for k < KT: the weights packed
// (C, 9, 16), so that every broadcast's address is a constant offset from one pointer.
template <int KT>
STOKE_THIN_KERNEL void thin_tile(int64_t C, const float* __restrict x, int64_t ldc, int64_t ws,
                                 const float* __restrict w, const float* __restrict bias,
                                 float* __restrict out, int64_t ldo, __mmask16 mask) {
  __m512 acc[KT];
#pragma GCC unroll 16
  for (int k = 0; k < KT; ++k) acc[k] = bias ? _mm512_set1_ps(bias[k]) : _mm512_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    const float* xc = x + c * ldc;
    __m512 xv[9];
#pragma GCC unroll 3
    for (int i = 0; i < 3; ++i)
#pragma GCC unroll 3
      for (int j = 0; j < 3; ++j) xv[i * 3 + j] = _mm512_loadu_ps(xc + i * ws + j);
    const float* wc = w + c * 9 * kThinMaxChannels;
    // Taps outside, channels inside: KT independent accumulation chains in flight.
#pragma GCC unroll 9
    for (int t = 0; t < 9; ++t)
#pragma GCC unroll 16
      for (int k = 0; k < KT; ++k)
        acc[k] = _mm512_fmadd_ps(xv[t], _mm512_set1_ps(wc[t * kThinMaxChannels + k]), acc[k]);
  }
  if (mask == 0xFFFF) {
#pragma GCC unroll 16
    for (int k = 0; k < KT; ++k) _mm512_storeu_ps(out + k * ldo, acc[k]);
  } else {
#pragma GCC unroll 16
    for (int k = 0; k < KT; ++k) _mm512_mask_storeu_ps(out + k * ldo, mask, acc[k]);
  }
}

using ThinTileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, const float*,
                            float*, int64_t, __mmask16);

template <int... KT>
constexpr std::array<ThinTileFn, sizeof...(KT)> thin_tile_table(std::integer_sequence<int, KT...>) {
  return {thin_tile<KT + 1>...};
}

// thin_tiles[kt - 1] computes kt output channels.
constexpr auto thin_tiles = thin_tile_table(std::make_integer_sequence<int, kThinMaxChannels>{});

// Weight gradient: acc[k][t] (vectors of 16 lane sums) += grad_out[k * ldg + l] *
// x[i * ws + j + l] for t = i * 3 + j, over `rows` output rows (grad_out's rows ldr floats apart,
// x's ws) of `segments` 16-output segments each; the last segment starts at last_ow and only its
// lanes in last_mask count (the lanes an earlier segment covered, or past the row's end). acc
// holds (9, 16) floats per output channel, ldk apart, loaded and stored back: a task's sums stay
// vectors until the end.
template <int KT>
STOKE_THIN_KERNEL void thin_weight_tile(int64_t rows, int64_t segments, int64_t last_ow,
                                        __mmask16 last_mask, bool masked_loads,
                                        const float* __restrict gout, int64_t ldg, int64_t ldr,
                                        const float* __restrict x, int64_t ws,
                                        float* __restrict acc_mem, int64_t ldk) {
  __m512 acc[KT][9];
#pragma GCC unroll 3
  for (int k = 0; k < KT; ++k)
#pragma GCC unroll 9
    for (int t = 0; t < 9; ++t) acc[k][t] = _mm512_loadu_ps(acc_mem + k * ldk + t * kThinLanes);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = gout + r * ldr;
    const float* xr = x + r * ws;
    for (int64_t s = 0; s < segments; ++s) {
      // The last segment's multiply-adds are masked: lanes outside the mask keep their sums,
      // whatever the input holds there (a masked FMA costs what a plain one does).
      const bool last = s + 1 == segments;
      const int64_t ow = last ? last_ow : s * kThinLanes;
      const __mmask16 mask = last ? last_mask : __mmask16(0xFFFF);
      __m512 gv[KT];
#pragma GCC unroll 3
      for (int k = 0; k < KT; ++k)
        gv[k] = last && masked_loads ? _mm512_maskz_loadu_ps(mask, gr + k * ldg + ow)
                                     : _mm512_loadu_ps(gr + k * ldg + ow);
#pragma GCC unroll 3
      for (int i = 0; i < 3; ++i)
#pragma GCC unroll 3
        for (int j = 0; j < 3; ++j) {
          const __m512 xv = _mm512_loadu_ps(xr + i * ws + j + ow);
#pragma GCC unroll 3
          for (int k = 0; k < KT; ++k)
            acc[k][i * 3 + j] = _mm512_mask3_fmadd_ps(gv[k], xv, acc[k][i * 3 + j], mask);
        }
    }
  }
#pragma GCC unroll 3
  for (int k = 0; k < KT; ++k)
#pragma GCC unroll 9
    for (int t = 0; t < 9; ++t) _mm512_storeu_ps(acc_mem + k * ldk + t * kThinLanes, acc[k][t]);
}

using ThinWeightTileFn = void (*)(int64_t, int64_t, int64_t, __mmask16, bool, const float*, int64_t,
                                  int64_t, const float*, int64_t, float*, int64_t);

// Output channels per weight-gradient tile: 3 x 9 accumulators, 9 input vectors loaded one at a
// time, 3 grad_out vectors (31 of 32 registers).
constexpr int kThinWeightChannels = 3;
constexpr ThinWeightTileFn thin_weight_tiles[kThinWeightChannels] = {
    thin_weight_tile<1>, thin_weight_tile<2>, thin_weight_tile<3>};

// The padded rows' width: every tile's 16-lane loads at columns up to ceil16(OW) + 2 stay inside.
int64_t thin_row_width(const ConvGeometry& g) {
  return (g.OW + kThinLanes - 1) / kThinLanes * kThinLanes + 2;
}

// buf (C, rows, ws) <- x's (C, H, W) input rows r0 - ph .. r0 - ph + rows - 1 with pw zero
// columns before each row, zeros outside the input.
void thin_copy_rows(const ConvGeometry& g, const float* x, int64_t r0, int64_t rows, int64_t ws,
                    float* buf) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = buf + (c * rows + r) * ws;
      const int64_t ih = r0 - g.ph + r;
      if (ih < 0 || ih >= g.H) {
        std::fill(dst, dst + ws, 0.0f);
        continue;
      }
      // Input columns -pw .. ws - pw - 1 of this row.
      const int64_t lo = std::min(ws, g.pw), hi = std::clamp<int64_t>(g.pw + g.W, lo, ws);
      std::fill(dst, dst + lo, 0.0f);
      std::memcpy(dst + lo, x + (c * g.H + ih) * g.W + (lo - g.pw), sizeof(float) * (hi - lo));
      std::fill(dst + hi, dst + ws, 0.0f);
    }
}

}  // namespace

bool thin_conv_fits(const ConvGeometry& g) {
  static const bool on = conv_kernel_enabled("STOKE_CONV_THIN", true);
  return on && g.groups == 1 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
         g.dw == 1 && g.C >= 1 && g.C * 9 < 64 && g.OH > 0 && g.OW > 0 && g.N > 0;
}

void thin_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                       float* out) {
  const int64_t ws = thin_row_width(g), rows = kThinRowsPerTask + 2;
  const int64_t blocks = (g.OH + kThinRowsPerTask - 1) / kThinRowsPerTask;
  const int64_t tasks = g.N * blocks;
  const int64_t buf_len = g.C * rows * ws + kThinLanes;  // slack: nothing reads it, but cheap
  const int64_t chunks = parallel_chunk_count(tasks, 1);
  const Tensor scratch = empty({chunks, buf_len});
  // The weights per tile of 16 output channels as (C, 9, 16), zeros past K.
  const int64_t tiles = (g.K + kThinMaxChannels - 1) / kThinMaxChannels;
  const int64_t tile_len = g.C * 9 * kThinMaxChannels;
  const Tensor packed = zeros({tiles * tile_len});
  float* wp = packed.data<float>();
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t r = 0; r < g.C * 9; ++r)
      wp[k / kThinMaxChannels * tile_len + r * kThinMaxChannels + k % kThinMaxChannels] =
          w[k * g.C * 9 + r];
  // Tiles start every 16 columns; a last partial tile moves back to end at OW (when OW >= 16).
  const int64_t segments = (g.OW + kThinLanes - 1) / kThinLanes;
  const __mmask16 last_mask = g.OW >= kThinLanes ? __mmask16(0xFFFF) : __mmask16((1u << g.OW) - 1u);
  parallel_chunks(0, tasks, 1, [&](int64_t chunk, int64_t t0, int64_t t1) {
    float* buf = scratch.data<float>() + chunk * buf_len;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / blocks, r0 = t % blocks * kThinRowsPerTask;
      const int64_t r1 = std::min(g.OH, r0 + kThinRowsPerTask);
      thin_copy_rows(g, x + n * g.C * g.H * g.W, r0, r1 - r0 + 2, ws, buf);
      const int64_t ldc = (r1 - r0 + 2) * ws;
      float* on = out + n * g.K * g.OH * g.OW;
      for (int64_t oh = r0; oh < r1; ++oh)
        for (int64_t s = 0; s < segments; ++s) {
          const bool last = s + 1 == segments;
          const int64_t ow = last && g.OW >= kThinLanes ? g.OW - kThinLanes : s * kThinLanes;
          const __mmask16 mask = last ? last_mask : __mmask16(0xFFFF);
          const float* xs = buf + (oh - r0) * ws + ow;
          for (int64_t k0 = 0; k0 < g.K; k0 += kThinMaxChannels) {
            const int64_t kt = std::min<int64_t>(kThinMaxChannels, g.K - k0);
            thin_tiles[static_cast<size_t>(kt - 1)](
                g.C, xs, ldc, ws, wp + k0 / kThinMaxChannels * tile_len, bias ? bias + k0 : nullptr,
                on + (k0 * g.OH + oh) * g.OW + ow, g.OH * g.OW, mask);
          }
        }
    }
  });
}

// Each task (a run of samples) sums into its own (K, C, 9, 16) vectors; the lanes and the tasks
// are added in order at the end (deterministic for a given pool size).
void thin_conv_backward_weight(const ConvGeometry& g, const float* grad_out, const float* x,
                               float* grad_w) {
  const int64_t ws = thin_row_width(g), rows = g.OH + 2, P = g.OH * g.OW;
  const int64_t acc_len = g.K * g.C * 9 * kThinLanes, buf_len = g.C * rows * ws + kThinLanes;
  const int64_t per_chunk = acc_len + buf_len;
  const int64_t chunks = parallel_chunk_count(g.N, 1);
  const Tensor scratch = empty({chunks, per_chunk});
  float* base = scratch.data<float>();
  // Segments of 16 outputs; the last one ends at OW where the row holds 16 (its loads stay in the
  // row), counting only the lanes no earlier segment did. Narrower rows load masked.
  const int64_t segments = (g.OW + kThinLanes - 1) / kThinLanes;
  const bool narrow = g.OW < kThinLanes;
  const int64_t last_ow = narrow ? 0 : g.OW - kThinLanes;
  const int64_t done = (segments - 1) * kThinLanes;  // outputs the full segments covered
  const __mmask16 last_mask =
      narrow ? __mmask16((1u << g.OW) - 1u) : __mmask16(0xFFFFu << (done - last_ow));
  parallel_chunks(0, g.N, 1, [&](int64_t chunk, int64_t n0, int64_t n1) {
    float* acc = base + chunk * per_chunk;  // (K, C, 9, 16)
    float* buf = acc + acc_len;             // (C, OH + 2, ws)
    std::fill(acc, acc + acc_len, 0.0f);
    for (int64_t n = n0; n < n1; ++n) {
      thin_copy_rows(g, x + n * g.C * g.H * g.W, 0, rows, ws, buf);
      const float* gn = grad_out + n * g.K * P;
      for (int64_t k0 = 0; k0 < g.K; k0 += kThinWeightChannels) {
        const int64_t kt = std::min<int64_t>(kThinWeightChannels, g.K - k0);
        for (int64_t c = 0; c < g.C; ++c)
          thin_weight_tiles[kt - 1](g.OH, segments, last_ow, last_mask, narrow, gn + k0 * P, P,
                                    g.OW, buf + c * rows * ws, ws,
                                    acc + (k0 * g.C + c) * 9 * kThinLanes, g.C * 9 * kThinLanes);
      }
    }
  });
  // grad_w[k][c][t] = the tasks' lane sums, in task and lane order, parallel over output channels.
  parallel_for(0, g.K, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t r = 0; r < g.C * 9; ++r) {
        float sum = 0.0f;
        for (int64_t ch = 0; ch < chunks; ++ch) {
          const float* v = base + ch * per_chunk + (k * g.C * 9 + r) * kThinLanes;
          for (int64_t l = 0; l < kThinLanes; ++l) sum += v[l];
        }
        grad_w[k * g.C * 9 + r] = sum;
      }
  });
}

}  // namespace stoke::ops::cpu
