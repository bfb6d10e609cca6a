// Direct convolution for f32 on CPUs with AVX-512, stride 1 or 2 (ops/cpu/conv2d.cpp picks it;
// see conv2d_kernels.h). No column matrix: each sample's input is copied once into a zero-padded
// grid of OH+kh-1 rows of Wp = OW+kw-1 columns, and the output is computed on the same flattened
// grid, q = oh*Wp + ow, where kernel tap (i, j) reads the input at q + i*Wp + j: for every tap, 16
// consecutive outputs read 16 consecutive inputs, one vector load. The kw-1 columns past OW in
// each grid row are computed and dropped (2/9 of a 7x7 plane, 2/30 of a 28x28 one): the tiles
// store their vectors straight into the output, squeezing (compressing) those columns out of the
// vectors that hold some (ResNet-8's 16-channel 28x28 layer forward 1.23-1.27 -> 1.15-1.17 ms
// against a second pass that copied the grid into the output).
//
// "Same" stride-1 layers (output plane = input plane) skip the copy: the tiles read the input in
// place with masked loads (run_same below).
//
// Stride s > 1 splits the padded input into s*s phases, phase (a, b) holding the rows a, a+s, ..
// and columns b, b+s, ..: tap (i, j) of output (oh, ow) reads phase (i%s, j%s) at (oh + i/s,
// ow + j/s), so on grids of OH + (kh-1)/s rows of Wp = OW + (kw-1)/s columns every tap is again
// one shifted vector load (an offset per tap, tap_offsets), with no multiply wasted.
//
// Register tile: KB output channels x NV vectors of 16 grid positions (KB*NV <= 24 accumulators).
// Per input channel and tap: NV vector loads, KB weight broadcasts, KB*NV FMAs. The weights are
// repacked once per call so that a tile's KB broadcasts are consecutive floats.
//
// Why it exists and where it beats im2col + OpenBLAS (ResNet's 16-64 channel layers, whose GEMMs
// have only 16-64 rows): docs/design-notes.md, "CPU convolution".
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/conv2d_kernels.h"
#include "ops/creation.h"

namespace stoke::ops::cpu {
namespace {

constexpr int64_t kDirectLanes = 16;

// The register-tile kernels: AVX-512 whatever -march the file is built for (the callers check the
// CPU at run time), and not instrumented by AddressSanitizer. Sanitizer builds run them too (on
// AVX-512 CPUs); GCC 12's ASan places 64-byte vector temporaries misaligned in its fake stack
// frames (docs/design-notes.md), which these functions' accumulator arrays would hit. Their
// callers, which fill and read every buffer the kernels touch, stay instrumented.
#define STOKE_DIRECT_KERNEL __attribute__((target("avx512f"), no_sanitize_address))

// The flattened padded grid of one sample.
struct DirectPlan {
  int64_t s, phases;      // stride; s*s phase planes per channel
  int64_t Wp, Hp, plane;  // a phase's grid width, height, Hp*Wp
  int64_t chan;           // phases*plane: one channel's grids
  int64_t Q, Qr;          // grid outputs OH*Wp, rounded up to whole tiles
  int64_t Kr;             // output channels rounded up to whole tiles
  int64_t xpad_len;       // C*chan plus the slack the last tile reads past the grids
  int kb, nv;
};

// Where tap (i, j) of a channel reads, from the channel's first grid, with `ld` floats from one
// phase's grid to the next (the plan's plane, or a longer row of several samples' grids).
int64_t tap_offset(const DirectPlan& p, int64_t i, int64_t j, int64_t ld) {
  return ((i % p.s) * p.s + j % p.s) * ld + (i / p.s) * p.Wp + j / p.s;
}

// Where a vector of 16 grid positions goes in the output: the output index of its first position
// that is an output (the grid's kw-1 extra columns per row are not), and which lanes are outputs.
// A vector spans at most two grid rows, so its output lanes are consecutive outputs once the
// extra columns between them are squeezed out.
struct DirectStore {
  int64_t at;
  __mmask16 lanes;
  bool whole;  // all 16 lanes are outputs (so consecutive ones): a plain store
};

// Where a tile reads and writes: on the padded grid, `stores` places its vectors' outputs; on a
// "same" layer's planes read in place (run_same), masks[v * taps + t] are the lanes of vector v
// that tap t reads inside the plane and the first `valid` positions are the tile's outputs.
struct TileIo {
  const DirectStore* stores;
  const __mmask16* masks;
  int64_t valid;
};

// out (the sample's output, channels ldo apart) <- bias + the register tile: KB output channels
// (the first kvalid real ones) x NV vectors of 16 positions (of the grid, or of the planes when
// Same). Per input channel and tap: NV vector loads, KB weight broadcasts, KB*NV FMAs.
template <int KB, int NV, bool Same>
STOKE_DIRECT_KERNEL void direct_tile(int64_t C, int64_t taps, const int64_t* __restrict off,
                                     int64_t chan, const float* __restrict x,
                                     const float* __restrict w, TileIo io,
                                     const float* __restrict bias, int kvalid,
                                     float* __restrict out, int64_t ldo) {
  __m512 acc[KB][NV];
#pragma GCC unroll 8
  for (int k = 0; k < KB; ++k) {
    const __m512 b = bias && k < kvalid ? _mm512_set1_ps(bias[k]) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[k][v] = b;
  }
  const __mmask16* __restrict masks = io.masks;
  for (int64_t c = 0; c < C; ++c) {
    const float* xc = x + c * chan;
    for (int64_t t = 0; t < taps; ++t) {
      const float* xs = xc + off[t];
      __m512 xv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        if constexpr (Same)
          xv[v] = _mm512_maskz_loadu_ps(masks[v * taps + t], xs + kDirectLanes * v);
        else
          xv[v] = _mm512_loadu_ps(xs + kDirectLanes * v);
      }
#pragma GCC unroll 8
      for (int k = 0; k < KB; ++k) {
        const __m512 wb = _mm512_set1_ps(w[k]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[k][v] = _mm512_fmadd_ps(wb, xv[v], acc[k][v]);
      }
      w += KB;
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    if constexpr (Same) {
      const int64_t left = io.valid - kDirectLanes * v;
      if (left <= 0) break;
      const __mmask16 lanes =
          left >= kDirectLanes ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
#pragma GCC unroll 8
      for (int k = 0; k < KB; ++k) {
        if (k >= kvalid) break;
        _mm512_mask_storeu_ps(out + k * ldo + kDirectLanes * v, lanes, acc[k][v]);
      }
    } else {
      const DirectStore st = io.stores[v];
      if (st.lanes == 0) continue;
      const __mmask16 head = __mmask16((1u << __builtin_popcount(st.lanes)) - 1u);
#pragma GCC unroll 8
      for (int k = 0; k < KB; ++k) {
        if (k >= kvalid) break;
        float* o = out + k * ldo + st.at;
        if (st.whole)
          _mm512_storeu_ps(o, acc[k][v]);
        else
          _mm512_mask_storeu_ps(o, head, _mm512_maskz_compress_ps(st.lanes, acc[k][v]));
      }
    }
  }
}

using TileFn = void (*)(int64_t, int64_t, const int64_t*, int64_t, const float*, const float*,
                        TileIo, const float*, int, float*, int64_t);

// The shapes plan_of chooses from: {KB, NV}.
constexpr int kTileShapes[3][2] = {{8, 3}, {6, 4}, {4, 6}};

template <bool Same>
TileFn tile_fn(int kb) {
  if (kb == 8) return direct_tile<8, 3, Same>;
  if (kb == 6) return direct_tile<6, 4, Same>;
  return direct_tile<4, 6, Same>;
}

// Sets p.kb, p.nv to the tile shape with the least padded work for K channels over Q positions
// (ceil(K/KB)*KB channels times Q rounded up to whole tiles: a 7x7 plane's 63 grid outputs fill
// 4 vectors; 28x28's 840 fill 53, 18 tiles of 3), and p.Kr to K rounded up to whole tiles.
void choose_tile(int64_t K, int64_t Q, DirectPlan& p) {
  int64_t best = -1;
  for (const auto& s : kTileShapes) {
    const int64_t span = kDirectLanes * s[1];
    const int64_t work = (K + s[0] - 1) / s[0] * s[0] * ((Q + span - 1) / span * span);
    if (best < 0 || work < best) {
      best = work;
      p.kb = s[0];
      p.nv = s[1];
    }
  }
  p.Kr = (K + p.kb - 1) / p.kb * p.kb;
}

DirectPlan plan_of(const ConvGeometry& g) {
  DirectPlan p{};
  p.s = g.sh;
  p.phases = p.s * p.s;
  p.Wp = g.OW + (g.kw - 1) / p.s;
  p.Hp = g.OH + (g.kh - 1) / p.s;
  p.plane = p.Hp * p.Wp;
  p.chan = p.phases * p.plane;
  p.Q = g.OH * p.Wp;
  choose_tile(g.K, p.Q, p);
  const int64_t span = kDirectLanes * p.nv;
  p.Qr = (p.Q + span - 1) / span * span;
  // The last tile reads up to Qr-1 + the largest tap offset past its channel's first grid, and
  // copy_into_grid writes every phase of every channel, C*chan floats: more than the taps reach
  // when the kernel is smaller than the stride (a 1x1 stride-2 kernel reads phase (0, 0) only;
  // ResNet-18's 128-channel downsampling wrote 176 floats past the scratch).
  int64_t reach = 0;
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) reach = std::max(reach, tap_offset(p, i, j, p.plane));
  p.xpad_len = std::max((g.C - 1) * p.chan + reach + p.Qr + kDirectLanes, g.C * p.chan);
  return p;
}

// tap_offset of every tap (i, j), row-major.
std::vector<int64_t> tap_offsets(const ConvGeometry& g, const DirectPlan& p, int64_t ld) {
  std::vector<int64_t> off(static_cast<size_t>(g.kh * g.kw));
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      off[static_cast<size_t>(i * g.kw + j)] = tap_offset(p, i, j, ld);
  return off;
}

// Copies one sample (C, H, W) into zeroed grids: phase (a, b) of channel c, at
// grid + (c*phases + a*s + b)*ld, holds x[s*u + a - ph][s*v + b - pw] at (u, v) of its Hp x Wp
// grid. Rows or columns outside the input stay zero (padding); inputs outside the grids are read
// by no output.
void copy_into_grid(const ConvGeometry& g, const DirectPlan& p, const float* x, float* grid,
                    int64_t ld) {
  const int64_t s = p.s;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t a = 0; a < s; ++a)
      for (int64_t b = 0; b < s; ++b) {
        float* dst = grid + (c * p.phases + a * s + b) * ld;
        // Grid column v reads input column s*v + b - pw: the v with that in [0, W).
        const int64_t v0 = std::max<int64_t>(0, (g.pw - b + s - 1) / s);
        const int64_t v1 = std::min(p.Wp, (g.W - 1 + g.pw - b) / s + 1);
        if (v0 >= v1 || g.W - 1 + g.pw - b < 0) continue;
        for (int64_t u = 0; u < p.Hp; ++u) {
          const int64_t h = s * u + a - g.ph;
          if (h < 0 || h >= g.H) continue;
          const float* src = x + (c * g.H + h) * g.W;
          float* d = dst + u * p.Wp;
          if (s == 1) {
            std::memcpy(d + v0, src + v0 - g.pw, sizeof(float) * (v1 - v0));
          } else if (s == 2) {
            // The constant stride lets GCC vectorize the even/odd split (two loads, a permute);
            // the copy with a run-time stride took half as long as the stride-2 kernel itself.
            const float* __restrict sb = src + b - g.pw;
            float* __restrict dv = d;
            for (int64_t v = v0; v < v1; ++v) dv[v] = sb[2 * v];
          } else {
            for (int64_t v = v0; v < v1; ++v) d[v] = src[s * v + b - g.pw];
          }
        }
      }
}

// wp[kblock][c][i][j][kb] <- w[k][c][i][j] (zeros for the channels past K), or, transposed and
// flipped for the input gradient, wt[c][k][kh-1-i][kw-1-j].
void pack_weight(const ConvGeometry& g, const DirectPlan& p, const float* w, bool flip, float* wp) {
  const int64_t taps = g.kh * g.kw, R = g.C * taps;
  std::fill(wp, wp + p.Kr * R, 0.0f);
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        // flip: g is the transposed problem (its K is the forward's C, its C the forward's K).
        const float v =
            flip ? w[(c * g.K + k) * taps + (taps - 1 - t)] : w[(k * g.C + c) * taps + t];
        wp[(k / p.kb) * p.kb * R + (c * taps + t) * p.kb + k % p.kb] = v;
      }
}

// Every grid vector's DirectStore: grid position q is output (q / Wp, q % Wp) where q % Wp < OW.
std::vector<DirectStore> direct_stores(const ConvGeometry& g, const DirectPlan& p) {
  std::vector<DirectStore> st(static_cast<size_t>(p.Qr / kDirectLanes));
  for (size_t i = 0; i < st.size(); ++i) {
    const int64_t q0 = static_cast<int64_t>(i) * kDirectLanes;
    DirectStore d{-1, 0, false};
    for (int64_t l = 0; l < kDirectLanes; ++l) {
      const int64_t q = q0 + l, row = q / p.Wp, col = q % p.Wp;
      if (q >= p.Q || col >= g.OW) continue;
      if (d.at < 0) d.at = row * g.OW + col;
      d.lanes = __mmask16(d.lanes | (1u << l));
    }
    // All 16 lanes outputs: no extra column between them, so 16 consecutive outputs.
    d.whole = d.lanes == 0xFFFF;
    if (d.at < 0) d.at = 0;
    st[i] = d;
  }
  return st;
}

// "Same" stride-1 convolutions (OH = H, OW = W: ResNet's 3x3 layers with padding 1) skip the
// padded grid: the tiles read each sample's planes in place, with every tap's vector load masked
// to the lanes whose input lies inside the plane (the others read zeros, as the grid's padding
// gave). No copy per sample and no extra grid columns computed (the grid's 2 per 30 on 28x28, and
// its last tile's unused lanes: 864 outputs computed per 784): ResNet-8's 16-channel 28x28 layer
// forward 1.13-1.15 -> 0.99-1.00 ms (200 repetitions, 5 runs each). Lanes outside the plane are
// never read (masked loads do not fault on them), even where their addresses lie before the
// sample's first plane or past its last.
bool same_plane(const ConvGeometry& g) {
  return g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.OH == g.H && g.OW == g.W;
}

void run_same(const ConvGeometry& g, const float* x, const float* w, bool flip, const float* bias,
              float* out) {
  const int64_t taps = g.kh * g.kw, R = g.C * taps, Q = g.H * g.W;
  // The tile shape with the least padded work (pack_weight reads kb and Kr).
  DirectPlan p{};
  p.s = 1;
  choose_tile(g.K, Q, p);
  const TileFn tile = tile_fn<true>(p.kb);
  const int64_t span = kDirectLanes * p.nv, vectors = (Q + span - 1) / span * p.nv;
  // Tap (i, j) of output q = oh*W + ow reads the plane at q + off, where it lies inside.
  std::vector<int64_t> off(static_cast<size_t>(taps));
  std::vector<__mmask16> masks(static_cast<size_t>(vectors * taps), 0);
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      off[static_cast<size_t>(i * g.kw + j)] = (i - g.ph) * g.W + (j - g.pw);
  // One pass over the outputs (the lanes past Q stay off), oh and ow stepped rather than divided.
  for (int64_t q = 0, oh = 0, ow = 0; q < Q; ++q) {
    const auto bit = static_cast<__mmask16>(1u << (q % kDirectLanes));
    __mmask16* m = masks.data() + q / kDirectLanes * taps;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = oh + i - g.ph;
      if (ih < 0 || ih >= g.H) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t iw = ow + j - g.pw;
        if (iw >= 0 && iw < g.W) m[i * g.kw + j] = static_cast<__mmask16>(m[i * g.kw + j] | bit);
      }
    }
    if (++ow == g.W) {
      ow = 0;
      ++oh;
    }
  }
  const Tensor packed = empty({p.Kr * R});
  pack_weight(g, p, w, flip, packed.data<float>());
  const float* wp = packed.data<float>();
  parallel_chunks(0, g.N, 1, [&](int64_t, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xn = x + n * g.C * Q;
      float* on = out + n * g.K * Q;
      for (int64_t k0 = 0; k0 < p.Kr; k0 += p.kb) {
        const int kvalid = static_cast<int>(std::min<int64_t>(p.kb, g.K - k0));
        for (int64_t q0 = 0; q0 < Q; q0 += span)
          tile(g.C, taps, off.data(), Q, xn + q0, wp + k0 * R,
               {.stores = nullptr,
                .masks = masks.data() + q0 / kDirectLanes * taps,
                .valid = Q - q0},
               bias ? bias + k0 : nullptr, kvalid, on + k0 * Q + q0, Q);
      }
    }
  });
}

void run_direct(const ConvGeometry& g, const float* x, const float* w, bool flip, const float* bias,
                float* out) {
  if (same_plane(g)) return run_same(g, x, w, flip, bias, out);
  const DirectPlan p = plan_of(g);
  const TileFn tile = tile_fn<false>(p.kb);
  const int64_t taps = g.kh * g.kw, R = g.C * taps, span = kDirectLanes * p.nv;
  const std::vector<int64_t> off = tap_offsets(g, p, p.plane);
  const std::vector<DirectStore> stores = direct_stores(g, p);
  // Scratch as tensors, so that the caching allocator recycles it from call to call.
  const Tensor packed = empty({p.Kr * R});
  const float* wp = packed.data<float>();
  pack_weight(g, p, w, flip, packed.data<float>());
  const int64_t chunks = parallel_chunk_count(g.N, 1);
  const Tensor scratch = empty({chunks, p.xpad_len});
  parallel_chunks(0, g.N, 1, [&](int64_t chunk, int64_t n0, int64_t n1) {
    float* xpad = scratch.data<float>() + chunk * p.xpad_len;
    // Zeroed once: every sample's copy writes the same (interior) positions, the padding stays 0.
    std::fill(xpad, xpad + p.xpad_len, 0.0f);
    for (int64_t n = n0; n < n1; ++n) {
      copy_into_grid(g, p, x + n * g.C * g.H * g.W, xpad, p.plane);
      float* on = out + n * g.K * g.OH * g.OW;
      // The tiles store straight into the output, squeezing out the grid's extra columns.
      for (int64_t k0 = 0; k0 < p.Kr; k0 += p.kb) {
        const int kvalid = static_cast<int>(std::min<int64_t>(p.kb, g.K - k0));
        for (int64_t q0 = 0; q0 < p.Q; q0 += span)
          tile(g.C, taps, off.data(), p.chan, xpad + q0, wp + k0 * R,
               {.stores = stores.data() + q0 / kDirectLanes, .masks = nullptr, .valid = 0},
               bias ? bias + k0 : nullptr, kvalid, on + k0 * g.OH * g.OW, g.OH * g.OW);
      }
    }
  });
}

// Weight gradient. dW[k][r] for r = (c, i, j) is the dot product, over every sample's grid
// position q, of grad_out on the grid (zero in the dropped columns and rows) with the input grid
// shifted by i*Wp + j. Several samples' grids are laid end to end (a block of about kWeightSpan
// positions), and a register tile of KW output channels x RW weight rows accumulates vectors of
// 16 partial sums over the whole block: per vector of positions KW + RW loads and KW*RW FMAs. The
// vectors are kept between blocks in a per-task buffer and summed across lanes at the end.
constexpr int kWeightKW = 4, kWeightRW = 6;
constexpr int64_t kWeightSpan = 1024;

STOKE_DIRECT_KERNEL void weight_tile(int64_t positions, const float* __restrict g, int64_t ldg,
                                     const float* __restrict x, const int64_t* __restrict off,
                                     float* __restrict pv, int64_t ldpv, bool first) {
  __m512 acc[kWeightKW][kWeightRW];
  const float* xr[kWeightRW];
#pragma GCC unroll 8
  for (int r = 0; r < kWeightRW; ++r) xr[r] = x + off[r];
#pragma GCC unroll 8
  for (int k = 0; k < kWeightKW; ++k)
#pragma GCC unroll 8
    for (int r = 0; r < kWeightRW; ++r)
      acc[k][r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pv + k * ldpv + r * kDirectLanes);
  for (int64_t q = 0; q < positions; q += kDirectLanes) {
    __m512 xv[kWeightRW];
#pragma GCC unroll 8
    for (int r = 0; r < kWeightRW; ++r) xv[r] = _mm512_loadu_ps(xr[r] + q);
#pragma GCC unroll 8
    for (int k = 0; k < kWeightKW; ++k) {
      const __m512 gv = _mm512_loadu_ps(g + k * ldg + q);
#pragma GCC unroll 8
      for (int r = 0; r < kWeightRW; ++r) acc[k][r] = _mm512_fmadd_ps(gv, xv[r], acc[k][r]);
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < kWeightKW; ++k)
#pragma GCC unroll 8
    for (int r = 0; r < kWeightRW; ++r)
      _mm512_storeu_ps(pv + k * ldpv + r * kDirectLanes, acc[k][r]);
}

void run_direct_weight(const ConvGeometry& g, const float* grad_out, const float* x, float* gw) {
  const DirectPlan p = plan_of(g);
  const int64_t Wp = p.Wp, plane = p.plane;
  const int64_t taps = g.kh * g.kw, R = g.C * taps;
  const int64_t Kr = (g.K + kWeightKW - 1) / kWeightKW * kWeightKW;
  const int64_t Rr = (R + kWeightRW - 1) / kWeightRW * kWeightRW;
  const int64_t S = std::max<int64_t>(1, kWeightSpan / plane);  // samples per block
  const int64_t L = (S * plane + kDirectLanes - 1) / kDirectLanes * kDirectLanes;
  // A row per channel and phase: the S samples' grids of that phase end to end, plus what the
  // last vector of the last tap reads past them.
  const int64_t ldx = L + (g.kh - 1) / p.s * Wp + (g.kw - 1) / p.s + 1 + kDirectLanes;
  const int64_t rows_x = g.C * p.phases;
  const int64_t blocks = (g.N + S - 1) / S;
  // Row r's offset in the input grids; rows past R read row 0 and are dropped.
  std::vector<int64_t> off(static_cast<size_t>(Rr), 0);
  const std::vector<int64_t> tap = tap_offsets(g, p, ldx);
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t t = 0; t < taps; ++t)
      off[static_cast<size_t>(c * taps + t)] = c * p.phases * ldx + tap[static_cast<size_t>(t)];
  const int64_t chunks = parallel_chunk_count(blocks, 1);
  const int64_t pv_len = Kr * Rr * kDirectLanes, per_chunk = pv_len + rows_x * ldx + Kr * L;
  const Tensor scratch = empty({chunks, per_chunk});
  float* base = scratch.data<float>();
  parallel_chunks(0, blocks, 1, [&](int64_t chunk, int64_t b0, int64_t b1) {
    float* pv = base + chunk * per_chunk;
    float* xs = pv + pv_len;        // (C * phases, ldx): S samples' input grids end to end
    float* gs = xs + rows_x * ldx;  // (Kr, L): their grad_out on the grid
    if (b0 == b1) std::fill(pv, pv + pv_len, 0.0f);
    for (int64_t b = b0; b < b1; ++b) {
      std::fill(xs, xs + rows_x * ldx + Kr * L, 0.0f);
      const int64_t n0 = b * S, n1 = std::min(g.N, n0 + S);
      for (int64_t n = n0; n < n1; ++n) {
        const int64_t at = (n - n0) * plane;
        copy_into_grid(g, p, x + n * g.C * g.H * g.W, xs + at, ldx);
        for (int64_t k = 0; k < g.K; ++k)
          for (int64_t oh = 0; oh < g.OH; ++oh)
            std::memcpy(gs + k * L + at + oh * Wp, grad_out + ((n * g.K + k) * g.OH + oh) * g.OW,
                        sizeof(float) * g.OW);
      }
      for (int64_t k0 = 0; k0 < Kr; k0 += kWeightKW)
        for (int64_t r0 = 0; r0 < Rr; r0 += kWeightRW)
          weight_tile(L, gs + k0 * L, L, xs, off.data() + r0, pv + (k0 * Rr + r0) * kDirectLanes,
                      Rr * kDirectLanes, b == b0);
    }
  });
  // gw[k][r] = the chunks' lane sums, in chunk and lane order (deterministic), parallel over the
  // output channels (each element is summed by one task).
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, R * chunks));
  parallel_for(0, g.K, grain, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t r = 0; r < R; ++r) {
        float s = 0.0f;
        for (int64_t c = 0; c < chunks; ++c) {
          const float* v = base + c * per_chunk + (k * Rr + r) * kDirectLanes;
          for (int64_t l = 0; l < kDirectLanes; ++l) s += v[l];
        }
        gw[k * R + r] = s;
      }
  });
}

// The input gradient of a stride-1 convolution is a stride-1 convolution of grad_out with the
// weight transposed and flipped, padded by k-1-p.
ConvGeometry transposed_geometry(const ConvGeometry& g) {
  ConvGeometry t = g;
  t.C = g.K;
  t.K = g.C;
  t.H = g.OH;
  t.W = g.OW;
  t.OH = g.H;
  t.OW = g.W;
  t.ph = g.kh - 1 - g.ph;
  t.pw = g.kw - 1 - g.pw;
  return t;
}

bool direct_enabled() {
  static const bool on = conv_kernel_enabled("STOKE_CONV_DIRECT", true);
  return on;
}

// Where the direct kernel beats im2col + GEMM (measured on ResNet-8's and VGG-11's layers,
// docs/design-notes.md): at least 64 multiply-adds per output (the 1-channel stem's 9 leave the
// tiles mostly overhead: 0.78 ms against GEMM's 0.42), or 25 for kernels of 5x5 and up (LeNet-5's
// 1-channel 5x5 stem: training 29.6-30.0k -> 32.3-35.2k img/s, forward and weight gradient), and at
// least 60% of the computed grid used (a 3x3 plane fills 9 of a 48-wide tile, 3x slower than GEMM;
// 7x7 fills 49 of 64).
bool direct_conv_fits(const ConvGeometry& g) {
  if (!direct_enabled() || g.sh != g.sw || g.sh < 1 || g.sh > 2 || g.dh != 1 || g.dw != 1 ||
      g.groups != 1 || g.OH <= 0 || g.OW <= 0 || g.C * g.kh * g.kw < (g.kh * g.kw >= 25 ? 25 : 64))
    return false;
  const DirectPlan p = plan_of(g);
  return 10 * g.OH * g.OW >= 6 * p.Qr;
}

}  // namespace

bool direct_conv_forward_fits(const ConvGeometry& g) {
  return direct_conv_fits(g);
}

bool direct_conv_backward_input_fits(const ConvGeometry& g) {
  // A strided convolution's input gradient is not a strided convolution (im2col + GEMM has it).
  return g.sh == 1 && g.sw == 1 && direct_conv_fits(transposed_geometry(g));
}

void direct_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                         float* out) {
  run_direct(g, x, w, false, bias, out);
}

bool direct_conv_backward_weight_fits(const ConvGeometry& g) {
  // The per-task vector partial sums (K*R*16 floats) must stay small: up to VGG-11's 128x576
  // at 14x14 (4.7 MB; 78 against 86 ms forward + backward measured with GEMM's weight gradient),
  // and the grid mostly outputs: a 7x7 plane is 49 of 81 grid positions, where GEMM was faster
  // (10.7 ms against 9.7 for ResNet-8's 64-channel layer, forward + backward); 14x14 is 196/256.
  // Strided layers keep im2col + GEMM's weight gradient: the direct one over phase grids was
  // slower on ResNet-8's (fwd + bwd 4.2 -> 4.9 ms and 3.3 -> 3.7 ms).
  if (g.sh != 1) return false;
  const int64_t grid = (g.OH + g.kh - 1) * (g.OW + g.kw - 1);
  return direct_conv_fits(g) && g.K * g.C * g.kh * g.kw <= 131072 && 10 * g.OH * g.OW >= 7 * grid;
}

void direct_conv_backward_weight(const ConvGeometry& g, const float* grad_out, const float* x,
                                 float* grad_w) {
  run_direct_weight(g, grad_out, x, grad_w);
}

void direct_conv_backward_input(const ConvGeometry& g, const float* grad_out, const float* w,
                                float* grad_in) {
  run_direct(transposed_geometry(g), grad_out, w, true, nullptr, grad_in);
}

}  // namespace stoke::ops::cpu
