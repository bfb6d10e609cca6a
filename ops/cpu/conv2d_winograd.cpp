// Winograd F(2x2, 3x3) convolution for f32 3x3 stride-1 layers with 32+ channels in and out
// (ResNet's and VGG-11's, 5x5 planes and up): 16 multiplies per 2x2 output tile instead of 36.
//
// Each 4x4 input tile d (overlapping by 2) becomes V = Bᵀ d B, each 3x3 kernel U = G w Gᵀ, and the
// 2x2 output is Y = Aᵀ (U ⊙ V) A. Summed over input channels, the elementwise product is 16
// independent GEMMs, one per tile element ξ: M[ξ] (tiles, K) = V[ξ] (tiles, C) · Uᵀ[ξ] (C, K).
// The backward passes are the same 16 GEMMs transposed: with dM = A dY Aᵀ per tile,
//   input gradient:  dV[ξ] (tiles, C) = dM[ξ] · U[ξ], scattered back as B dV Bᵀ;
//   weight gradient: dU[ξ] (K, C) = Σ dM[ξ]ᵀ · V[ξ], and dW = Gᵀ dU G.
// Tiles past the output's edge (odd output sizes) compute values that are never stored, and get a
// zero output gradient. The transformed tiles keep channels innermost, and each sample's planes
// are copied channels-last first, so every transform is a loop over channels the compiler
// vectorizes (16 loads, 16 stores, ~32 adds per 16 channels). Work runs in blocks of whole samples
// (about kWinogradTiles tiles: GEMMs of that many rows, a few MiB of scratch), parallel over chunks
// of blocks; the weight gradient sums per-chunk partials in chunk order (deterministic for a
// given thread count, as the other paths). The GEMMs go through gemm_fastest (ops/cpu/gemm.h):
// stoke's AVX-512 kernel where OpenBLAS runs narrower ones.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/parallel.h"
#include "ops/cpu/conv2d_kernels.h"
#include "ops/cpu/gemm.h"
#include "ops/creation.h"

namespace stoke::ops::cpu {
namespace {

// "These iterations are independent": GCC's ivdep, clang's assume_safety (see the transforms).
#if defined(__clang__)
#define STOKE_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define STOKE_IVDEP _Pragma("GCC ivdep")
#endif

constexpr int64_t kWinogradTiles = 128;  // target GEMM rows (tiles) of one block
constexpr int64_t kXi = 16;              // elements of a transformed 4x4 tile

struct WinogradPlan {
  int64_t TH, TW, tiles;  // 2x2 output tiles per sample: rows, columns, all
  int64_t PH, PW;         // the zero-padded input plane the tiles read: (2*TH + 2) x (2*TW + 2)
  int64_t nb, blocks;     // samples per block, blocks
};

WinogradPlan winograd_plan(const ConvGeometry& g) {
  WinogradPlan p{};
  p.TH = (g.OH + 1) / 2;
  p.TW = (g.OW + 1) / 2;
  p.tiles = p.TH * p.TW;
  p.PH = 2 * p.TH + 2;
  p.PW = 2 * p.TW + 2;
  // Enough samples for a GEMM of about kWinogradTiles rows, but a block for every thread.
  const int64_t by_width = (kWinogradTiles + p.tiles - 1) / p.tiles;
  const int64_t by_threads = (g.N + num_threads() - 1) / num_threads();
  p.nb = std::clamp<int64_t>(std::min(by_width, by_threads), 1, std::max<int64_t>(g.N, 1));
  p.blocks = (g.N + p.nb - 1) / p.nb;
  return p;
}

bool winograd_enabled() {
  static const bool on = conv_kernel_enabled("STOKE_CONV_WINOGRAD", false);
  return on;
}

// Channels-last copies: dst ((rows, row_len) grid, C channels innermost) at rows y0.., columns
// x0.. <- src (C, H, W); and back. One transpose per image row: (C, W) <-> (W, C).
void to_channels_last(const float* __restrict src, int64_t C, int64_t H, int64_t W,
                      float* __restrict dst, int64_t row_len, int64_t y0, int64_t x0) {
  for (int64_t y = 0; y < H; ++y)
    transpose(src + y * W, C, W, H * W, dst + ((y + y0) * row_len + x0) * C, C);
}

void from_channels_last(const float* __restrict src, int64_t row_len, int64_t y0, int64_t x0,
                        int64_t C, int64_t H, int64_t W, float* __restrict dst) {
  for (int64_t y = 0; y < H; ++y)
    transpose(src + ((y + y0) * row_len + x0) * C, W, C, C, dst + y * W, H * W);
}

// The transforms of one tile, vectorized over the n channels innermost in every buffer: tile
// element ξ of v / m lies xi_stride floats after element 0; d / out is the tile's top-left corner
// in a channels-last grid of rows row floats apart.

// Each transform reads and writes its tile elements through one pointer apiece, indexed by the
// channel alone, and its loop carries STOKE_IVDEP: the 16 + 16 streams never overlap, but without
// the pragma GCC would need more run-time alias checks than it allows and leave the loop scalar.

// v = Bᵀ d B, Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
void input_tile(const float* d, int64_t row, int64_t n, float* v, int64_t xi_stride) {
  const float* __restrict r0 = d;
  const float* __restrict r1 = d + row;
  const float* __restrict r2 = d + 2 * row;
  const float* __restrict r3 = d + 3 * row;
  float* __restrict o[16];
  for (int xi = 0; xi < 16; ++xi) o[xi] = v + xi * xi_stride;
  const int64_t n2 = 2 * n, n3 = 3 * n;
  STOKE_IVDEP
  for (int64_t c = 0; c < n; ++c) {
    const float d00 = r0[c], d01 = r0[n + c], d02 = r0[n2 + c], d03 = r0[n3 + c];
    const float d10 = r1[c], d11 = r1[n + c], d12 = r1[n2 + c], d13 = r1[n3 + c];
    const float d20 = r2[c], d21 = r2[n + c], d22 = r2[n2 + c], d23 = r2[n3 + c];
    const float d30 = r3[c], d31 = r3[n + c], d32 = r3[n2 + c], d33 = r3[n3 + c];
    // Bᵀ d, row by row
    const float t00 = d00 - d20, t01 = d01 - d21, t02 = d02 - d22, t03 = d03 - d23;
    const float t10 = d10 + d20, t11 = d11 + d21, t12 = d12 + d22, t13 = d13 + d23;
    const float t20 = d20 - d10, t21 = d21 - d11, t22 = d22 - d12, t23 = d23 - d13;
    const float t30 = d10 - d30, t31 = d11 - d31, t32 = d12 - d32, t33 = d13 - d33;
    o[0][c] = t00 - t02, o[1][c] = t01 + t02, o[2][c] = t02 - t01, o[3][c] = t01 - t03;
    o[4][c] = t10 - t12, o[5][c] = t11 + t12, o[6][c] = t12 - t11, o[7][c] = t11 - t13;
    o[8][c] = t20 - t22, o[9][c] = t21 + t22, o[10][c] = t22 - t21, o[11][c] = t21 - t23;
    o[12][c] = t30 - t32, o[13][c] = t31 + t32, o[14][c] = t32 - t31, o[15][c] = t31 - t33;
  }
}

// out = Aᵀ m A + bias, Aᵀ = [1 1 1 0; 0 1 -1 -1]: the tile's 2x2 outputs. bias: n values, or
// zeros (never null: `bias ? bias[k] : 0` in the loop became a masked load from the null
// pointer, which AMD's Zen 5 runs through a slow path: half the forward's time).
void output_tile(const float* m, int64_t xi_stride, const float* __restrict bias, int64_t n,
                 float* out, int64_t row) {
  const float* __restrict e[16];
  for (int xi = 0; xi < 16; ++xi) e[xi] = m + xi * xi_stride;
  float* __restrict y0 = out;
  float* __restrict y1 = out + row;
  STOKE_IVDEP
  for (int64_t k = 0; k < n; ++k) {
    // m A, row by row
    const float s00 = e[0][k] + e[1][k] + e[2][k], s01 = e[1][k] - e[2][k] - e[3][k];
    const float s10 = e[4][k] + e[5][k] + e[6][k], s11 = e[5][k] - e[6][k] - e[7][k];
    const float s20 = e[8][k] + e[9][k] + e[10][k], s21 = e[9][k] - e[10][k] - e[11][k];
    const float s30 = e[12][k] + e[13][k] + e[14][k], s31 = e[13][k] - e[14][k] - e[15][k];
    const float b = bias[k];
    y0[k] = s00 + s10 + s20 + b;
    y0[n + k] = s01 + s11 + s21 + b;
    y1[k] = s10 - s20 - s30 + b;
    y1[n + k] = s11 - s21 - s31 + b;
  }
}

// m = A dY Aᵀ of the tile's 2x2 output gradient dY: A maps (u, v) to (u, u + v, u - v, -v).
void grad_output_tile(const float* gy, int64_t row, int64_t n, float* m, int64_t xi_stride) {
  const float* __restrict g0 = gy;
  const float* __restrict g1 = gy + row;
  float* __restrict o[16];
  for (int xi = 0; xi < 16; ++xi) o[xi] = m + xi * xi_stride;
  STOKE_IVDEP
  for (int64_t k = 0; k < n; ++k) {
    const float g00 = g0[k], g01 = g0[n + k], g10 = g1[k], g11 = g1[n + k];
    // A dY: rows (g0, g0 + g1, g0 - g1, -g1), each (u, v) -> (u, u + v, u - v, -v)
    const float u0 = g00, v0 = g01, u1 = g00 + g10, v1 = g01 + g11;
    const float u2 = g00 - g10, v2 = g01 - g11, u3 = -g10, v3 = -g11;
    o[0][k] = u0, o[1][k] = u0 + v0, o[2][k] = u0 - v0, o[3][k] = -v0;
    o[4][k] = u1, o[5][k] = u1 + v1, o[6][k] = u1 - v1, o[7][k] = -v1;
    o[8][k] = u2, o[9][k] = u2 + v2, o[10][k] = u2 - v2, o[11][k] = -v2;
    o[12][k] = u3, o[13][k] = u3 + v3, o[14][k] = u3 - v3, o[15][k] = -v3;
  }
}

// d += B v Bᵀ: B maps (v0, v1, v2, v3) to (v0, v1 - v2 + v3, -v0 + v1 + v2, -v3).
void grad_input_tile(const float* v, int64_t xi_stride, int64_t n, float* d, int64_t row) {
  const float* __restrict e[16];
  for (int xi = 0; xi < 16; ++xi) e[xi] = v + xi * xi_stride;
  float* __restrict r0 = d;
  float* __restrict r1 = d + row;
  float* __restrict r2 = d + 2 * row;
  float* __restrict r3 = d + 3 * row;
  const int64_t n2 = 2 * n, n3 = 3 * n;
  STOKE_IVDEP
  for (int64_t c = 0; c < n; ++c) {
    // v Bᵀ, row by row: (v0, v1 - v2 + v3, -v0 + v1 + v2, -v3)
    float t[4][4];
    for (int i = 0; i < 4; ++i) {
      const float a0 = e[4 * i][c], a1 = e[4 * i + 1][c], a2 = e[4 * i + 2][c],
                  a3 = e[4 * i + 3][c];
      t[i][0] = a0;
      t[i][1] = a1 - a2 + a3;
      t[i][2] = -a0 + a1 + a2;
      t[i][3] = -a3;
    }
    r0[c] += t[0][0], r0[n + c] += t[0][1], r0[n2 + c] += t[0][2], r0[n3 + c] += t[0][3];
    r1[c] += t[1][0] - t[2][0] + t[3][0], r1[n + c] += t[1][1] - t[2][1] + t[3][1];
    r1[n2 + c] += t[1][2] - t[2][2] + t[3][2], r1[n3 + c] += t[1][3] - t[2][3] + t[3][3];
    r2[c] += -t[0][0] + t[1][0] + t[2][0], r2[n + c] += -t[0][1] + t[1][1] + t[2][1];
    r2[n2 + c] += -t[0][2] + t[1][2] + t[2][2], r2[n3 + c] += -t[0][3] + t[1][3] + t[2][3];
    r3[c] -= t[3][0], r3[n + c] -= t[3][1], r3[n2 + c] -= t[3][2], r3[n3 + c] -= t[3][3];
  }
}

// v (16, cols, C) at tile rows t0.. <- the tiles of one sample x (C, H, W), through pad, its
// zero-padded channels-last copy (PH, PW, C).
void transform_sample_input(const ConvGeometry& g, const WinogradPlan& p, const float* x,
                            float* pad, float* v, int64_t xi_stride, int64_t t0) {
  std::fill(pad, pad + p.PH * p.PW * g.C, 0.0f);
  to_channels_last(x, g.C, g.H, g.W, pad, p.PW, g.ph, g.pw);
  const int64_t row = p.PW * g.C;
  for (int64_t ty = 0; ty < p.TH; ++ty)
    for (int64_t tx = 0; tx < p.TW; ++tx)
      input_tile(pad + (2 * ty * p.PW + 2 * tx) * g.C, row, g.C, v + (t0 + ty * p.TW + tx) * g.C,
                 xi_stride);
}

// u = G w Gᵀ for each 3x3 kernel of w (K, C, 3, 3), as (16, K, C), or (16, C, K) when
// transposed; G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]. Parallel over blocks of 16 output channels;
// the transposed layout runs the channels of a block innermost, so each of the 16 tile elements
// is written 16 consecutive floats at a time.
void transform_weight(const ConvGeometry& g, const float* w, float* u, bool transposed) {
  const int64_t KC = g.K * g.C, blocks = (g.K + 15) / 16;
  auto one = [&](int64_t k, int64_t c) {
    const float* f = w + (k * g.C + c) * 9;
    float t[4][3];  // G w
    for (int j = 0; j < 3; ++j) {
      t[0][j] = f[j];
      t[1][j] = 0.5f * (f[j] + f[3 + j] + f[6 + j]);
      t[2][j] = 0.5f * (f[j] - f[3 + j] + f[6 + j]);
      t[3][j] = f[6 + j];
    }
    float* uk = u + (transposed ? c * g.K + k : k * g.C + c);
    for (int i = 0; i < 4; ++i) {
      uk[(4 * i) * KC] = t[i][0];
      uk[(4 * i + 1) * KC] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
      uk[(4 * i + 2) * KC] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
      uk[(4 * i + 3) * KC] = t[i][2];
    }
  };
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t k0 = b * 16, k1 = std::min(g.K, k0 + 16);
      if (transposed) {
        for (int64_t c = 0; c < g.C; ++c)
          for (int64_t k = k0; k < k1; ++k) one(k, c);
      } else {
        for (int64_t k = k0; k < k1; ++k)
          for (int64_t c = 0; c < g.C; ++c) one(k, c);
      }
    }
  });
}

// gw (K, C, 3, 3) = Gᵀ dU G of the chunks' partials (chunks, 16, K, C) summed in chunk order.
void weight_grad_from_partials(const ConvGeometry& g, const float* partial, int64_t chunks,
                               float* gw) {
  const int64_t KC = g.K * g.C, len = kXi * KC;
  parallel_for(0, g.K, 8, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t c = 0; c < g.C; ++c) {
        float du[4][4];
        for (int xi = 0; xi < kXi; ++xi) {
          const int64_t src = xi * KC + k * g.C + c;
          float s = partial[src];
          for (int64_t ch = 1; ch < chunks; ++ch) s += partial[ch * len + src];
          du[xi / 4][xi % 4] = s;
        }
        // Gᵀ dU G: Gᵀ maps a column (a, b, c, d) to (a + (b + c)/2, (b - c)/2, (b + c)/2 + d).
        float t[3][4];
        for (int j = 0; j < 4; ++j) {
          t[0][j] = du[0][j] + 0.5f * (du[1][j] + du[2][j]);
          t[1][j] = 0.5f * (du[1][j] - du[2][j]);
          t[2][j] = 0.5f * (du[1][j] + du[2][j]) + du[3][j];
        }
        float* out = gw + (k * g.C + c) * 9;
        for (int i = 0; i < 3; ++i) {
          out[3 * i] = t[i][0] + 0.5f * (t[i][1] + t[i][2]);
          out[3 * i + 1] = 0.5f * (t[i][1] - t[i][2]);
          out[3 * i + 2] = 0.5f * (t[i][1] + t[i][2]) + t[i][3];
        }
      }
  });
}

}  // namespace

namespace {

bool winograd_shape(const ConvGeometry& g, int64_t min_channels) {
  return winograd_enabled() && g.groups == 1 && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 &&
         g.dh == 1 && g.dw == 1 && g.C >= min_channels && g.K >= min_channels && g.OH >= 5 &&
         g.OW >= 5 && g.N > 0;
}

}  // namespace

// Measured against the direct kernels and im2col + GEMM on VGG-11's and ResNet's layers
// (docs/design-notes.md): the forward is worth it from 32 channels in and out on planes of 5x5 and
// up; the backward from 16 (ResNet-8's 16 -> 16 layer at 28x28, batch 128: the direct kernels'
// backward 4.0-4.2 ms, Winograd's 2.8; its forward stays direct, 1.22 against Winograd's 1.35).
bool winograd_conv_fits(const ConvGeometry& g) {
  return winograd_shape(g, 32);
}

bool winograd_conv_backward_fits(const ConvGeometry& g) {
  return winograd_shape(g, 16);
}

namespace {

// One chunk's scratch: V or dV (16, cols, C), M or dM (16, cols, K), the padded channels-last
// input (or its gradient) of one sample (PH, PW, C) and its output (or output gradient) on the
// tiles' grid (2*TH, 2*TW, K).
struct WinogradScratch {
  int64_t per_chunk, v, m, pad, stage;  // offsets in floats
};

WinogradScratch scratch_layout(const ConvGeometry& g, const WinogradPlan& p) {
  const int64_t cols = p.nb * p.tiles;
  WinogradScratch s{};
  s.v = 0;
  s.m = s.v + kXi * cols * g.C;
  s.pad = s.m + kXi * cols * g.K;
  s.stage = s.pad + p.PH * p.PW * g.C;
  s.per_chunk = s.stage + 4 * p.tiles * g.K;
  return s;
}

}  // namespace

void winograd_conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                           float* out) {
  const WinogradPlan p = winograd_plan(g);
  const WinogradScratch sl = scratch_layout(g, p);
  const int64_t KC = g.K * g.C;
  Tensor u = empty({kXi * KC}, {.dtype = DType::f32});  // (16, C, K)
  transform_weight(g, w, u.data<float>(), /*transposed=*/true);
  const float* up = u.data<float>();
  Tensor zero_bias;
  if (!bias) {
    zero_bias = zeros({g.K}, {.dtype = DType::f32});
    bias = zero_bias.data<float>();
  }
  const int64_t chunks = parallel_chunk_count(p.blocks, 1);
  Tensor scratch = empty({chunks * sl.per_chunk}, {.dtype = DType::f32});
  parallel_chunks(0, p.blocks, 1, [&](int64_t chunk, int64_t b0, int64_t b1) {
    float* base = scratch.data<float>() + chunk * sl.per_chunk;
    float *v = base + sl.v, *m = base + sl.m, *pad = base + sl.pad, *stage = base + sl.stage;
    const int64_t srow = 2 * p.TW * g.K;  // the staged output's row, in floats
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * p.nb, nb = std::min(p.nb, g.N - n0), cols = nb * p.tiles;
      for (int64_t s = 0; s < nb; ++s)
        transform_sample_input(g, p, x + (n0 + s) * g.C * g.in_plane(), pad, v, cols * g.C,
                               s * p.tiles);
      // M[ξ] (cols, K) = V[ξ] (cols, C) · U[ξ]ᵀ (C, K)
      for (int64_t xi = 0; xi < kXi; ++xi)
        gemm_fastest(cols, g.K, g.C, v + xi * cols * g.C, g.C, 1, up + xi * KC, g.K, false,
                     m + xi * cols * g.K, g.K);
      for (int64_t s = 0; s < nb; ++s) {
        for (int64_t ty = 0; ty < p.TH; ++ty)
          for (int64_t tx = 0; tx < p.TW; ++tx)
            output_tile(m + (s * p.tiles + ty * p.TW + tx) * g.K, cols * g.K, bias, g.K,
                        stage + 2 * ty * srow + 2 * tx * g.K, srow);
        from_channels_last(stage, 2 * p.TW, 0, 0, g.K, g.OH, g.OW,
                           out + (n0 + s) * g.K * g.out_plane());
      }
    }
  });
}

void winograd_conv_backward(const ConvGeometry& g, const float* gout, const float* x,
                            const float* w, float* gin, float* gw) {
  const WinogradPlan p = winograd_plan(g);
  const WinogradScratch sl = scratch_layout(g, p);
  const int64_t KC = g.K * g.C;
  Tensor u;
  if (gin) {
    u = empty({kXi * KC}, {.dtype = DType::f32});  // (16, K, C)
    transform_weight(g, w, u.data<float>(), /*transposed=*/false);
  }
  const int64_t chunks = parallel_chunk_count(p.blocks, 1);
  Tensor scratch = empty({chunks * sl.per_chunk}, {.dtype = DType::f32});
  Tensor partial;  // per chunk: dU (16, K, C)
  if (gw) partial = empty({chunks * kXi * KC}, {.dtype = DType::f32});
  parallel_chunks(0, p.blocks, 1, [&](int64_t chunk, int64_t b0, int64_t b1) {
    float* base = scratch.data<float>() + chunk * sl.per_chunk;
    float *v = base + sl.v, *dm = base + sl.m, *pad = base + sl.pad, *stage = base + sl.stage;
    float* du = gw ? partial.data<float>() + chunk * kXi * KC : nullptr;
    const int64_t srow = 2 * p.TW * g.K, prow = p.PW * g.C;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * p.nb, nb = std::min(p.nb, g.N - n0), cols = nb * p.tiles;
      for (int64_t s = 0; s < nb; ++s) {
        // The output gradient on the tiles' grid, zero past the output's edge.
        std::fill(stage, stage + 4 * p.tiles * g.K, 0.0f);
        to_channels_last(gout + (n0 + s) * g.K * g.out_plane(), g.K, g.OH, g.OW, stage, 2 * p.TW, 0,
                         0);
        for (int64_t ty = 0; ty < p.TH; ++ty)
          for (int64_t tx = 0; tx < p.TW; ++tx)
            grad_output_tile(stage + 2 * ty * srow + 2 * tx * g.K, srow, g.K,
                             dm + (s * p.tiles + ty * p.TW + tx) * g.K, cols * g.K);
      }
      if (du) {
        for (int64_t s = 0; s < nb; ++s)
          transform_sample_input(g, p, x + (n0 + s) * g.C * g.in_plane(), pad, v, cols * g.C,
                                 s * p.tiles);
        // dU[ξ] (K, C) += dM[ξ]ᵀ (K, cols) · V[ξ] (cols, C); the chunk's first block overwrites.
        for (int64_t xi = 0; xi < kXi; ++xi)
          gemm_fastest(g.K, g.C, cols, dm + xi * cols * g.K, 1, g.K, v + xi * cols * g.C, g.C,
                       b > b0, du + xi * KC, g.C);
      }
      if (gin) {
        // dV[ξ] (cols, C) = dM[ξ] (cols, K) · U[ξ] (K, C), into V's buffer.
        const float* up = u.data<float>();
        for (int64_t xi = 0; xi < kXi; ++xi)
          gemm_fastest(cols, g.C, g.K, dm + xi * cols * g.K, g.K, 1, up + xi * KC, g.C, false,
                       v + xi * cols * g.C, g.C);
        for (int64_t s = 0; s < nb; ++s) {
          std::fill(pad, pad + p.PH * p.PW * g.C, 0.0f);
          for (int64_t ty = 0; ty < p.TH; ++ty)
            for (int64_t tx = 0; tx < p.TW; ++tx)
              grad_input_tile(v + (s * p.tiles + ty * p.TW + tx) * g.C, cols * g.C, g.C,
                              pad + (2 * ty * p.PW + 2 * tx) * g.C, prow);
          // The plane's part of the padded gradient (the padding's share is dropped).
          from_channels_last(pad, p.PW, g.ph, g.pw, g.C, g.H, g.W,
                             gin + (n0 + s) * g.C * g.in_plane());
        }
      }
    }
    if (du && b0 == b1) std::fill(du, du + kXi * KC, 0.0f);
  });
  if (gw) weight_grad_from_partials(g, partial.data<float>(), chunks, gw);
}

}  // namespace stoke::ops::cpu
