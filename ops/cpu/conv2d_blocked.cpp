// Channel-blocked direct convolution for f32 on CPUs with AVX-512 (ops/cpu/conv2d.cpp picks it
// for strided layers and thin stems; see conv2d_kernels.h). Vectors run along the output channels
// instead of along the output positions (conv2d_direct.cpp): a register tile is KV vectors of 16
// output channels x P consecutive outputs of one output row, and per input channel and kernel tap
// it loads KV weight vectors and broadcasts P input values (FMAs with an embedded broadcast), so a
// stride only spaces the broadcasts out: no phase split of the input, and no output computed and
// dropped. The input gradient runs the same tiles per phase of the stride, the weight gradient a
// tile of output-channel vectors x one kernel row's (tap, input channel) pairs over each
// sample's outputs. Why, and what it replaced: docs/design-notes.md, "Third pass:
// channel-blocked kernels for strided layers".
//
// Per sample: the input is copied once into a zero-padded (C, Hp, Wp) buffer (plain rows, any
// padding), the tiles write the output position-major (OH*OW, Kr) with the bias as the
// accumulators' start, and one transpose turns that into the (K, OH*OW) output.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/conv2d_kernels.h"
#include "ops/creation.h"

namespace stoke::ops::cpu {
namespace {

constexpr int64_t kBlockedLanes = 16;
constexpr int kBlockedMaxKV = 4;          // channel vectors per tile
constexpr int kBlockedMaxP = 14;          // outputs per tile
constexpr int kBlockedAccumulators = 28;  // KV * P at most: 28 + KV weight vectors of 32 zmm

// As conv2d_direct.cpp's kernels: AVX-512 whatever -march the file is built for (the callers check
// the CPU at run time), not instrumented by AddressSanitizer (GCC 12's fake stack frames misalign
// 64-byte vector temporaries; docs/design-notes.md).
#define STOKE_BLOCKED_KERNEL __attribute__((target("avx512f"), no_sanitize_address))

// out[p][v*16 + l] = bias[v*16 + l] + sum over rows r of w[r][v*16 + l] * x[off[r] + S*p], for
// p < P, v < KV: rows r = (c, i, j) are the input channels and kernel taps, off[r] the tap's
// offset in the padded input from the tile's first output, w's rows ldw floats apart, out's ldo.
template <int S, int KV, int P>
STOKE_BLOCKED_KERNEL void blocked_tile(int64_t R, const int64_t* __restrict off,
                                       const float* __restrict x, const float* __restrict w,
                                       int64_t ldw, const float* __restrict bias,
                                       float* __restrict out, int64_t ldo) {
  __m512 acc[KV][P];
#pragma GCC unroll 4
  for (int v = 0; v < KV; ++v) {
    const __m512 b = _mm512_loadu_ps(bias + kBlockedLanes * v);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[v][p] = b;
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + off[r];
    const float* wr = w + r * ldw;
    __m512 wv[KV];
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) wv[v] = _mm512_loadu_ps(wr + kBlockedLanes * v);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const __m512 xb = _mm512_set1_ps(xr[S * p]);
#pragma GCC unroll 4
      for (int v = 0; v < KV; ++v) acc[v][p] = _mm512_fmadd_ps(wv[v], xb, acc[v][p]);
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) _mm512_storeu_ps(out + p * ldo + kBlockedLanes * v, acc[v][p]);
}

using BlockedTileFn = void (*)(int64_t, const int64_t*, const float*, const float*, int64_t,
                               const float*, float*, int64_t);

// blocked_tile_table<S>()[KV-1][P-1]: the kernels with KV * P <= 28 (null past that).
template <int S, int KV, int P>
constexpr BlockedTileFn blocked_tile_entry() {
  if constexpr (KV * P <= kBlockedAccumulators)
    return blocked_tile<S, KV, P>;
  else
    return nullptr;
}

template <int S, int KV, size_t... Ps>
constexpr std::array<BlockedTileFn, kBlockedMaxP> blocked_tile_row(std::index_sequence<Ps...>) {
  return {blocked_tile_entry<S, KV, static_cast<int>(Ps) + 1>()...};
}

template <int S>
constexpr std::array<std::array<BlockedTileFn, kBlockedMaxP>, kBlockedMaxKV> blocked_tile_table() {
  using Ps = std::make_index_sequence<kBlockedMaxP>;
  return {blocked_tile_row<S, 1>(Ps{}), blocked_tile_row<S, 2>(Ps{}), blocked_tile_row<S, 3>(Ps{}),
          blocked_tile_row<S, 4>(Ps{})};
}

BlockedTileFn blocked_tile_fn(int64_t s, int64_t kv, int64_t p) {
  static constexpr auto t1 = blocked_tile_table<1>(), t2 = blocked_tile_table<2>();
  return (s == 1 ? t1 : t2)[static_cast<size_t>(kv - 1)][static_cast<size_t>(p - 1)];
}

// The weight gradient's tile: acc[v][p] += grad_out[oh][ow][k vector v] * x[oh, ow's window][p]
// over one sample's outputs (oh, ow), where x is the padded input channels-last (the window's
// offset already in x) and p runs over P consecutive floats of it: one kernel row's (tap column
// j, input channel c) pairs, j*C + c. g is grad_out position-major (rows of ldg), acc read and
// written back (ldacc floats per p). Small tiles (a 1-channel stem's 3 taps) keep U sets of
// accumulators for consecutive outputs, so that enough FMA chains are in flight.
template <int KV, int P>
STOKE_BLOCKED_KERNEL void blocked_weight_tile(int64_t OH, int64_t OW, const float* __restrict x,
                                              int64_t x_row, int64_t x_col,
                                              const float* __restrict g, int64_t ldg,
                                              float* __restrict acc_out, int64_t ldacc) {
  constexpr int U = KV * P >= 8 ? 1 : KV * P >= 4 ? 2 : 4;
  __m512 acc[U][KV][P];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
      for (int v = 0; v < KV; ++v)
        acc[u][v][p] =
            u == 0 ? _mm512_loadu_ps(acc_out + p * ldacc + kBlockedLanes * v) : _mm512_setzero_ps();
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* xq = x + oh * x_row;
    const float* gq = g + oh * OW * ldg;
    int64_t ow = 0;
    for (; ow + U <= OW; ow += U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        __m512 gv[KV];
#pragma GCC unroll 4
        for (int v = 0; v < KV; ++v) gv[v] = _mm512_loadu_ps(gq + u * ldg + kBlockedLanes * v);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
          const __m512 xb = _mm512_set1_ps(xq[u * x_col + p]);
#pragma GCC unroll 4
          for (int v = 0; v < KV; ++v) acc[u][v][p] = _mm512_fmadd_ps(gv[v], xb, acc[u][v][p]);
        }
      }
      xq += U * x_col;
      gq += U * ldg;
    }
    for (; ow < OW; ++ow, xq += x_col, gq += ldg) {
      __m512 gv[KV];
#pragma GCC unroll 4
      for (int v = 0; v < KV; ++v) gv[v] = _mm512_loadu_ps(gq + kBlockedLanes * v);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        const __m512 xb = _mm512_set1_ps(xq[p]);
#pragma GCC unroll 4
        for (int v = 0; v < KV; ++v) acc[0][v][p] = _mm512_fmadd_ps(gv[v], xb, acc[0][v][p]);
      }
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) {
      __m512 sum = acc[0][v][p];
#pragma GCC unroll 4
      for (int u = 1; u < U; ++u) sum = _mm512_add_ps(sum, acc[u][v][p]);
      _mm512_storeu_ps(acc_out + p * ldacc + kBlockedLanes * v, sum);
    }
}

using BlockedWeightTileFn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*,
                                     int64_t, float*, int64_t);

template <int KV, int P>
constexpr BlockedWeightTileFn blocked_weight_entry() {
  if constexpr (KV * P <= kBlockedAccumulators)
    return blocked_weight_tile<KV, P>;
  else
    return nullptr;
}

template <int KV, size_t... Ps>
constexpr std::array<BlockedWeightTileFn, kBlockedMaxP> blocked_weight_row(
    std::index_sequence<Ps...>) {
  return {blocked_weight_entry<KV, static_cast<int>(Ps) + 1>()...};
}

BlockedWeightTileFn blocked_weight_tile_fn(int64_t kv, int64_t p) {
  using Ps = std::make_index_sequence<kBlockedMaxP>;
  static constexpr std::array<std::array<BlockedWeightTileFn, kBlockedMaxP>, kBlockedMaxKV> table =
      {blocked_weight_row<1>(Ps{}), blocked_weight_row<2>(Ps{}), blocked_weight_row<3>(Ps{}),
       blocked_weight_row<4>(Ps{})};
  return table[static_cast<size_t>(kv - 1)][static_cast<size_t>(p - 1)];
}

struct BlockedPlan {
  int64_t Hp, Wp, plane;  // the padded input: the rows and columns any output reads
  int64_t Kv, Kr;         // output channel vectors, Kv*16
};

BlockedPlan blocked_plan_of(const ConvGeometry& g) {
  BlockedPlan b{};
  b.Hp = g.sh * (g.OH - 1) + g.kh;
  b.Wp = g.sw * (g.OW - 1) + g.kw;
  b.plane = b.Hp * b.Wp;
  b.Kv = (g.K + kBlockedLanes - 1) / kBlockedLanes;
  b.Kr = b.Kv * kBlockedLanes;
  return b;
}

// xp (C, Hp, Wp) <- x (C, H, W) moved down by top rows and right by left columns, zeros around
// it (rows and columns of x past Hp or Wp are dropped). One vector per 16 columns, stored under
// the row's mask: the rows are short (28 floats on ResNet's 28x28 planes), and a memcpy and two
// fills per row cost more than the tiles' multiplies on them (perf). Loads are unmasked where all
// 16 lanes lie inside x, masked only at the tensor's ends.
STOKE_BLOCKED_KERNEL void blocked_copy_padded(int64_t C, int64_t H, int64_t W, int64_t top,
                                              int64_t left, int64_t Hp, int64_t Wp, const float* x,
                                              float* xp) {
  // Padded column u holds x's column u - left: the u with that in [0, W) and below Wp.
  const int64_t u0 = std::clamp<int64_t>(left, 0, Wp);
  const int64_t u1 = std::clamp<int64_t>(left + W, u0, Wp);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i end = _mm512_set1_epi32(static_cast<int>(Wp));
  const __m512i first = _mm512_set1_epi32(static_cast<int>(u0));
  const __m512i last = _mm512_set1_epi32(static_cast<int>(u1));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = 0; r < Hp; ++r) {
      float* dst = xp + (c * Hp + r) * Wp;
      const int64_t h = r - top;
      const bool live = h >= 0 && h < H && u0 < u1;
      // src[u] is column u - left of row h, read only where u0 <= u < u1.
      const float* src = live ? x + (c * H + h) * W - left : nullptr;
      for (int64_t u = 0; u < Wp; u += kBlockedLanes) {
        const __m512i col = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(u)));
        const __mmask16 in_row = _mm512_cmplt_epi32_mask(col, end);
        const __mmask16 data =
            live ? in_row & _mm512_cmpge_epi32_mask(col, first) & _mm512_cmplt_epi32_mask(col, last)
                 : 0;
        // Masked loads were the copy's hottest instruction (70% of its samples) on Zen 5.
        const int64_t at = (c * H + h) * W - left + u;
        __m512 v = _mm512_setzero_ps();
        if (data && at >= 0 && at + kBlockedLanes <= C * H * W) {
          __m512 all = _mm512_loadu_ps(src + u);
          __asm__("" : "+v"(all));  // keeps GCC from folding it back into a masked load
          v = _mm512_maskz_mov_ps(data, all);
        } else if (data) {
          v = _mm512_maskz_loadu_ps(data, src + u);
        }
        _mm512_mask_storeu_ps(dst + u, in_row, v);
      }
    }
}

// Asks for [p, p + n) in the L2 cache: the next sample's input while this one's tiles run (the
// copies read each sample once, from L3 or memory, and stalled on it: perf).
void blocked_prefetch_range(const float* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(float)); i += 64)
    _mm_prefetch(c + i, _MM_HINT_T1);
}

// The tiles of `count` outputs in a row, every channel vector: output p (0 <= p < count) is the
// tile kernels' x + S*p, written at out + p*ldo. Kv channel vectors, KV at a time.
void blocked_row_tiles(int64_t S, int64_t R, const int64_t* off, const float* x, int64_t count,
                       const float* w, int64_t ldw, const float* bias, int64_t Kv, float* out,
                       int64_t ldo) {
  const int64_t segs = (count + kBlockedMaxP - 1) / kBlockedMaxP;
  const int64_t seg = (count + segs - 1) / segs;
  const int64_t kv_max = std::min<int64_t>({kBlockedMaxKV, kBlockedAccumulators / seg, Kv});
  for (int64_t p0 = 0; p0 < count; p0 += seg) {
    const int64_t p = std::min(seg, count - p0);
    for (int64_t v0 = 0; v0 < Kv; v0 += kv_max) {
      const int64_t kv = std::min(kv_max, Kv - v0);
      blocked_tile_fn(S, kv, p)(R, off, x + S * p0, w + v0 * kBlockedLanes, ldw,
                                bias + v0 * kBlockedLanes, out + p0 * ldo + v0 * kBlockedLanes,
                                ldo);
    }
  }
}

}  // namespace

bool blocked_conv_fits(const ConvGeometry& g) {
  static const bool on = conv_kernel_enabled("STOKE_CONV_BLOCKED", true);
  return on && g.sh == g.sw && g.sh >= 1 && g.sh <= 2 && g.dh == 1 && g.dw == 1 && g.groups == 1 &&
         g.OH > 0 && g.OW > 0;
}

void blocked_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                          float* out) {
  const BlockedPlan b = blocked_plan_of(g);
  const int64_t taps = g.kh * g.kw, R = g.C * taps, P = g.OH * g.OW;
  // Weights as (R, Kr) rows, zeros past K: a tile's KV weight vectors are consecutive.
  const Tensor packed = empty({R * b.Kr + b.Kr});
  float* wp = packed.data<float>();
  float* bias_r = wp + R * b.Kr;
  transpose(w, g.K, R, R, wp, b.Kr);
  for (int64_t r = 0; r < R; ++r) std::fill(wp + r * b.Kr + g.K, wp + (r + 1) * b.Kr, 0.0f);
  std::fill(bias_r, bias_r + b.Kr, 0.0f);
  if (bias) std::copy(bias, bias + g.K, bias_r);
  // Row r = (c, i, j) reads the padded input at c*plane + i*Wp + j from the output's window.
  std::vector<int64_t> off(static_cast<size_t>(R));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j)
        off[static_cast<size_t>((c * g.kh + i) * g.kw + j)] = c * b.plane + i * b.Wp + j;
  const int64_t chunks = parallel_chunk_count(g.N, 1);
  const int64_t per_chunk = g.C * b.plane + P * b.Kr;
  const Tensor scratch = empty({chunks, per_chunk});
  parallel_chunks(0, g.N, 1, [&](int64_t chunk, int64_t n0, int64_t n1) {
    float* xp = scratch.data<float>() + chunk * per_chunk;
    float* ob = xp + g.C * b.plane;  // (P, Kr): the output position-major
    for (int64_t n = n0; n < n1; ++n) {
      blocked_copy_padded(g.C, g.H, g.W, g.ph, g.pw, b.Hp, b.Wp, x + n * g.C * g.H * g.W, xp);
      if (n + 1 < n1) blocked_prefetch_range(x + (n + 1) * g.C * g.H * g.W, g.C * g.H * g.W);
      for (int64_t oh = 0; oh < g.OH; ++oh)
        blocked_row_tiles(g.sh, R, off.data(), xp + g.sh * oh * b.Wp, g.OW, wp, b.Kr, bias_r, b.Kv,
                          ob + oh * g.OW * b.Kr, b.Kr);
      transpose(ob, P, g.K, b.Kr, out + n * g.K * P, P);
    }
  });
}

// The input gradient: grad_in[c][ih][iw] = sum over k, i, j of w[k][c][i][j] *
// grad_out[k][oh][ow] where s*oh + i = ih + ph and s*ow + j = iw + pw. An input row ih + ph =
// s*u + a and the columns iw + pw = s*v + b of one phase (a, b) meet only the taps i = a + s*m,
// j = b + s*n, at grad_out (u - m, v - n): for consecutive v, consecutive grad_out columns. So
// each phase is a stride-1 tile over a zero-padded grad_out with its own rows of (k, i, j), whose
// outputs are s columns apart in grad_in. Phases without taps (a 1x1 kernel's odd rows) get zeros.
void blocked_conv_backward_input(const ConvGeometry& g, const float* grad_out, const float* w,
                                 float* grad_in) {
  const int64_t s = g.sh, taps = g.kh * g.kw, P = g.H * g.W;
  const int64_t Cv = (g.C + kBlockedLanes - 1) / kBlockedLanes, Cr = Cv * kBlockedLanes;
  // grad_out padded by top rows and left columns (taps reach back up to (k-1)/s), and up to the
  // last u, v any input row or column has.
  const int64_t top = (g.kh - 1) / s, left = (g.kw - 1) / s;
  const int64_t Hp = top + std::max(g.OH, (g.H - 1 + g.ph) / s + 1);
  const int64_t Wp = left + std::max(g.OW, (g.W - 1 + g.pw) / s + 1);
  const int64_t plane = Hp * Wp;
  // Per phase (a, b): its rows (k, i, j) of weights over c (Cr floats each) and their offsets.
  std::vector<std::vector<int64_t>> off(static_cast<size_t>(s * s));
  std::vector<int64_t> first(static_cast<size_t>(s * s) + 1, 0);
  for (int64_t ab = 0; ab < s * s; ++ab) {
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t i = ab / s; i < g.kh; i += s)
        for (int64_t j = ab % s; j < g.kw; j += s)
          off[static_cast<size_t>(ab)].push_back(k * plane + (top - i / s) * Wp + (left - j / s));
    first[static_cast<size_t>(ab) + 1] =
        first[static_cast<size_t>(ab)] + static_cast<int64_t>(off[static_cast<size_t>(ab)].size());
  }
  const int64_t rows = first.back();
  const Tensor packed = zeros({rows * Cr + Cr});
  float* wp = packed.data<float>();
  const float* zero_bias = wp + rows * Cr;
  for (int64_t ab = 0; ab < s * s; ++ab) {
    float* row = wp + first[static_cast<size_t>(ab)] * Cr;
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t i = ab / s; i < g.kh; i += s)
        for (int64_t j = ab % s; j < g.kw; j += s, row += Cr)
          for (int64_t c = 0; c < g.C; ++c) row[c] = w[(k * g.C + c) * taps + i * g.kw + j];
  }
  const int64_t chunks = parallel_chunk_count(g.N, 1);
  const int64_t per_chunk = g.K * plane + P * Cr;
  const Tensor scratch = empty({chunks, per_chunk});
  parallel_chunks(0, g.N, 1, [&](int64_t chunk, int64_t n0, int64_t n1) {
    float* gp = scratch.data<float>() + chunk * per_chunk;
    float* ob = gp + g.K * plane;  // (P, Cr): grad_in position-major
    for (int64_t n = n0; n < n1; ++n) {
      blocked_copy_padded(g.K, g.OH, g.OW, top, left, Hp, Wp, grad_out + n * g.K * g.OH * g.OW, gp);
      if (n + 1 < n1)
        blocked_prefetch_range(grad_out + (n + 1) * g.K * g.OH * g.OW, g.K * g.OH * g.OW);
      for (int64_t ih = 0; ih < g.H; ++ih) {
        const int64_t a = (ih + g.ph) % s, u = (ih + g.ph) / s;
        for (int64_t b = 0; b < s; ++b) {
          // The columns iw = s*v + b - pw in [0, W).
          const int64_t v0 = std::max<int64_t>(0, (g.pw - b + s - 1) / s);
          const int64_t v1 = (g.W - 1 + g.pw - b) / s + 1;
          if (g.W - 1 + g.pw - b < 0 || v0 >= v1) continue;
          const size_t ab = static_cast<size_t>(a * s + b);
          blocked_row_tiles(1, static_cast<int64_t>(off[ab].size()), off[ab].data(),
                            gp + u * Wp + v0, v1 - v0, wp + first[ab] * Cr, Cr, zero_bias, Cv,
                            ob + (ih * g.W + s * v0 + b - g.pw) * Cr, s * Cr);
        }
      }
      transpose(ob, P, g.C, Cr, grad_in + n * g.C * P, P);
    }
  });
}

// The weight gradient: dW[k][c][i][j] = sum over samples and outputs (oh, ow) of
// grad_out[k][oh][ow] * x[c][s*oh + i - ph][s*ow + j - pw]. Per sample, the padded input goes
// channels-last and grad_out position-major, so a tile (KV vectors of output channels x P input
// channels of one tap) loads KV grad_out vectors and broadcasts P consecutive input values per
// output: no column matrix. Each task sums its samples into its own (taps, C, Kr) buffer; the
// buffers are added in task order at the end (deterministic for a given pool size).
void blocked_conv_backward_weight(const ConvGeometry& g, const float* grad_out, const float* x,
                                  float* grad_w) {
  const BlockedPlan b = blocked_plan_of(g);
  const int64_t taps = g.kh * g.kw, P = g.OH * g.OW;
  // A kernel row's (j, c) pairs are kw*C consecutive floats of the channels-last input: tiles of
  // up to 14 of them.
  const int64_t row_len = g.kw * g.C;
  const int64_t segs = (row_len + kBlockedMaxP - 1) / kBlockedMaxP;
  const int64_t seg = (row_len + segs - 1) / segs;
  const int64_t kv_max = std::min<int64_t>({kBlockedMaxKV, kBlockedAccumulators / seg, b.Kv});
  const int64_t acc_len = taps * g.C * b.Kr;
  const int64_t per_chunk = acc_len + 2 * g.C * b.plane + P * b.Kr;
  const int64_t chunks = parallel_chunk_count(g.N, 1);
  const Tensor scratch = empty({chunks, per_chunk});
  float* base = scratch.data<float>();
  parallel_chunks(0, g.N, 1, [&](int64_t chunk, int64_t n0, int64_t n1) {
    float* acc = base + chunk * per_chunk;  // (taps, C, Kr)
    float* xp = acc + acc_len;              // (C, Hp, Wp)
    float* xt = xp + g.C * b.plane;         // (Hp * Wp, C): channels-last
    float* gt = xt + g.C * b.plane;         // (P, Kr): grad_out position-major
    std::fill(acc, acc + acc_len, 0.0f);
    // The columns past K stay zero (the transposes below write the first K).
    std::fill(gt, gt + P * b.Kr, 0.0f);
    for (int64_t n = n0; n < n1; ++n) {
      blocked_copy_padded(g.C, g.H, g.W, g.ph, g.pw, b.Hp, b.Wp, x + n * g.C * g.H * g.W, xp);
      if (n + 1 < n1) {
        blocked_prefetch_range(x + (n + 1) * g.C * g.H * g.W, g.C * g.H * g.W);
        blocked_prefetch_range(grad_out + (n + 1) * g.K * P, g.K * P);
      }
      transpose(xp, g.C, b.plane, b.plane, xt, g.C);
      transpose(grad_out + n * g.K * P, g.K, P, P, gt, b.Kr);
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t e0 = 0; e0 < row_len; e0 += seg) {
          const int64_t p = std::min(seg, row_len - e0);
          for (int64_t v0 = 0; v0 < b.Kv; v0 += kv_max) {
            const int64_t kv = std::min(kv_max, b.Kv - v0);
            blocked_weight_tile_fn(kv, p)(g.OH, g.OW, xt + i * b.Wp * g.C + e0, g.sh * b.Wp * g.C,
                                          g.sw * g.C, gt + v0 * kBlockedLanes, b.Kr,
                                          acc + (i * row_len + e0) * b.Kr + v0 * kBlockedLanes,
                                          b.Kr);
          }
        }
    }
  });
  // grad_w[k][c][tap] = the tasks' sums in task order, parallel over output channels.
  parallel_for(0, g.K, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t t = 0; t < taps; ++t) {
          float sum = 0.0f;
          for (int64_t ch = 0; ch < chunks; ++ch)
            sum += base[ch * per_chunk + (t * g.C + c) * b.Kr + k];
          grad_w[(k * g.C + c) * taps + t] = sum;
        }
  });
}

}  // namespace stoke::ops::cpu
