// Implicit-GEMM conv2d forward (see conv2d_implicit_gemm.h).
//
// Per group g the convolution is one GEMM, Y_g = X_col * W_g^T:
//   GEMM M = N * OH * OW             one row per output pixel (n, oh, ow)
//   GEMM N = OC / groups             one column per output channel of the group
//   GEMM K = C / groups * KH * KW    one term per (input channel c, kernel row r, kernel col s)
//   X_col(m, k) = x[n, g * Cg + c, oh * sh - ph + r * dh, ow * sw - pw + s * dw] (0 in padding)
//   W_g(n, k)   = w[g * Kg + n, c, r, s]: the weight tensor is already this K-contiguous matrix.
// An im2col implementation writes X_col to memory (KH * KW times the input's size) and reads it
// back; here each 256-thread block gathers its TILE x 8 slab of X_col straight from x into shared
// memory and never stores it, then runs the register-blocked inner loop of sgemm v2 (gemm_tile.h's
// MicroTile; thread (tx, ty) owns GEMM rows tx + 16i and columns ty + 16j, TILE / 16 of each).
// Rows run along threadIdx.x so that both the gather (consecutive ow -> consecutive iw for stride
// 1) and the NCHW output stores (consecutive pixels of one channel plane) are coalesced.
//
// Each thread gathers the same GEMM row in every k-slab (256 is a multiple of
// TILE), so the row's (n, oh, ow) decomposition is done once; the k
// decomposition (c, r, s) costs two integer divisions per gathered element.
// Depthwise convolutions (OC / groups == 1) use one column of a TILE-wide tile:
// correct but wasteful; they want a direct kernel.
#include <climits>

#include "cuda/compat.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"
#include "cuda/kernels/gemm_tile.h"

namespace stoke::cuda {
namespace conv_igemm_detail {

constexpr int kThreads = 256;
constexpr int kSlab = 8;

// The geometry as the kernel uses it (32-bit, derived sizes precomputed).
struct Params {
  int C, H, W, K, R, S, OH, OW;
  int sh, sw, ph, pw, dh, dw;
  int Cg, Kg;  // channels and output channels per group
  int GM, GK;  // GEMM M (N * OH * OW) and K (Cg * R * S)
};

}  // namespace conv_igemm_detail

// One TILE x TILE tile of one group's output GEMM per block: blockIdx.x over
// GEMM rows (output pixels), blockIdx.y over the group's output channels,
// blockIdx.z over groups.
template <int TILE>
__global__ void __launch_bounds__(256)
    conv2d_implicit_gemm_kernel(conv_igemm_detail::Params p, const float* __restrict__ x,
                                const float* __restrict__ w, const float* __restrict__ bias,
                                float* __restrict__ y) {
  using conv_igemm_detail::kSlab;
  using conv_igemm_detail::kThreads;
  constexpr int TM = TILE / 16;
  constexpr int kRowsPerPass = kThreads / TILE;  // k-rows of the A slab gathered per pass
  __shared__ float As[kSlab][TILE];              // As[k][i] = X_col(m0 + i, k0 + k)
  __shared__ float Bs[kSlab][TILE + 1];          // Bs[k][j] = W_g(n0 + j, k0 + k); +1: the
                                                 // k-fastest stores would conflict otherwise
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int g = blockIdx.z;
  const int m0 = blockIdx.x * TILE, n0 = blockIdx.y * TILE;
  const int OHW = p.OH * p.OW;

  // The GEMM row this thread gathers in every slab, decomposed once.
  const int am = tid % TILE, ak = tid / TILE;
  const int gm = m0 + am;
  const bool m_ok = gm < p.GM;
  int ih0 = 0, iw0 = 0;
  const float* xg = x;
  if (m_ok) {
    const int nb = gm / OHW, pix = gm - nb * OHW;
    const int oh = pix / p.OW, ow = pix - oh * p.OW;
    ih0 = oh * p.sh - p.ph;
    iw0 = ow * p.sw - p.pw;
    xg = x + (static_cast<int64_t>(nb) * p.C + static_cast<int64_t>(g) * p.Cg) * p.H * p.W;
  }
  const int RS = p.R * p.S;
  const float* wg = w + static_cast<int64_t>(g) * p.Kg * p.GK;

  gemm_tile::MicroTile<TM, TM> t;  // the thread's TM x TM block of the output in t.acc
  t.clear();

  for (int k0 = 0; k0 < p.GK; k0 += kSlab) {
    STOKE_UNROLL
    for (int pass = 0; pass < kSlab / kRowsPerPass; ++pass) {
      const int kl = ak + pass * kRowsPerPass, gk = k0 + kl;
      float v = 0.f;
      if (m_ok && gk < p.GK) {
        const int c = gk / RS, rs = gk - c * RS;
        const int r = rs / p.S, s = rs - r * p.S;
        const int ih = ih0 + r * p.dh, iw = iw0 + s * p.dw;
        // One unsigned compare per bound also rejects negative (padding)
        // coordinates.
        if (static_cast<unsigned>(ih) < static_cast<unsigned>(p.H) &&
            static_cast<unsigned>(iw) < static_cast<unsigned>(p.W))
          v = xg[(static_cast<int64_t>(c) * p.H + ih) * p.W + iw];
      }
      As[kl][am] = v;
    }
    for (int e = tid; e < TILE * kSlab; e += kThreads) {
      const int kl = e % kSlab, nl = e / kSlab;
      const int gn = n0 + nl, gk = k0 + kl;
      Bs[kl][nl] = gn < p.Kg && gk < p.GK ? wg[static_cast<int64_t>(gn) * p.GK + gk] : 0.f;
    }
    __syncthreads();
    t.accumulate_slab(As, tx, Bs, ty);
    __syncthreads();  // the next slab overwrites the tiles
  }

  STOKE_UNROLL
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + tx + 16 * i;
    if (row >= p.GM) continue;
    const int nb = row / OHW, pix = row - nb * OHW;
    const int64_t oc0 = static_cast<int64_t>(g) * p.Kg;
    float* yp = y + (static_cast<int64_t>(nb) * p.K + oc0) * OHW + pix;
    STOKE_UNROLL
    for (int j = 0; j < TM; ++j) {
      const int n = n0 + ty + 16 * j;
      if (n < p.Kg) yp[static_cast<int64_t>(n) * OHW] = t.acc[i][j] + (bias ? bias[oc0 + n] : 0.f);
    }
  }
}

std::array<int64_t, 2> conv2d_implicit_gemm_output_size(const Conv2dGeometry& g) {
  const char* op = "cuda::conv2d_implicit_gemm";
  STOKE_CHECK(g.batch >= 0 && g.channels >= 1 && g.height >= 1 && g.width >= 1 &&
                  g.out_channels >= 1 && g.kernel_h >= 1 && g.kernel_w >= 1,
              op,
              "expected batch >= 0 and channels, height, width, out_channels, "
              "kernel sizes >= 1, ",
              "got input (", g.batch, ", ", g.channels, ", ", g.height, ", ", g.width,
              "), out_channels ", g.out_channels, ", kernel ", g.kernel_h, "x", g.kernel_w);
  STOKE_CHECK(g.stride_h >= 1 && g.stride_w >= 1 && g.dilation_h >= 1 && g.dilation_w >= 1 &&
                  g.pad_h >= 0 && g.pad_w >= 0,
              op, "expected stride >= 1, dilation >= 1 and padding >= 0, got stride ", g.stride_h,
              ",", g.stride_w, " dilation ", g.dilation_h, ",", g.dilation_w, " padding ", g.pad_h,
              ",", g.pad_w);
  STOKE_CHECK(g.groups >= 1 && g.channels % g.groups == 0 && g.out_channels % g.groups == 0, op,
              "expected channels (", g.channels, ") and out_channels (", g.out_channels,
              ") divisible by groups, got groups ", g.groups);
  const int64_t oh =
      (g.height + 2 * g.pad_h - g.dilation_h * (g.kernel_h - 1) - 1) / g.stride_h + 1;
  const int64_t ow = (g.width + 2 * g.pad_w - g.dilation_w * (g.kernel_w - 1) - 1) / g.stride_w + 1;
  STOKE_CHECK(g.height + 2 * g.pad_h >= g.dilation_h * (g.kernel_h - 1) + 1 &&
                  g.width + 2 * g.pad_w >= g.dilation_w * (g.kernel_w - 1) + 1,
              op, "input ", g.height, "x", g.width, " with padding ", g.pad_h, ",", g.pad_w,
              " is smaller than the dilated kernel ", g.kernel_h, "x", g.kernel_w, " (dilation ",
              g.dilation_h, ",", g.dilation_w, ")");
  return {oh, ow};
}

std::vector<int> conv2d_implicit_gemm_tile_sizes() {
  return {64, 32, 128};
}

namespace {

template <int TILE>
void launch_conv(const conv_igemm_detail::Params& p, int groups, const float* x, const float* w,
                 const float* bias, float* y, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.GM + TILE - 1) / TILE),
                  static_cast<unsigned>((p.Kg + TILE - 1) / TILE), static_cast<unsigned>(groups));
  auto* k = &conv2d_implicit_gemm_kernel<TILE>;
  STOKE_LAUNCH(k, grid, dim3(conv_igemm_detail::kThreads), 0, stream)
  (p, x, w, bias, y);
}

}  // namespace

void conv2d_implicit_gemm_forward(const Conv2dGeometry& g, const float* x, const float* w,
                                  const float* bias, float* y, cudaStream_t stream, int tile) {
  STOKE_NVTX_RANGE("stoke::cuda::conv2d_implicit_gemm");
  const char* op = "cuda::conv2d_implicit_gemm";
  const std::array<int64_t, 2> out = conv2d_implicit_gemm_output_size(g);
  const std::vector<int> tiles = conv2d_implicit_gemm_tile_sizes();
  const int t = tile == 0 ? tiles.front() : tile;
  STOKE_CHECK(t == 32 || t == 64 || t == 128, op, "expected tile 32, 64, 128 (or 0), got ", tile);
  const int64_t gm = g.batch * out[0] * out[1];
  const int64_t gk = g.channels / g.groups * g.kernel_h * g.kernel_w;
  const int64_t out_elems = gm * g.out_channels;
  STOKE_CHECK(gm <= INT_MAX && gk <= INT_MAX && g.height * g.width <= INT_MAX &&
                  g.out_channels * g.channels <= INT_MAX,
              op, "expected sizes whose products fit in 32 bits, got input (", g.batch, ", ",
              g.channels, ", ", g.height, ", ", g.width, ") and ", g.out_channels,
              " output channels");
  STOKE_CHECK(g.groups <= 65535 && (g.out_channels / g.groups + t - 1) / t <= 65535, op,
              "expected groups <= 65535, got ", g.groups);
  if (out_elems == 0) return;
  STOKE_CHECK(x != nullptr && w != nullptr && y != nullptr, op,
              "expected non-null x, w and y (bias may be null)");
  conv_igemm_detail::Params p{};
  p.C = static_cast<int>(g.channels);
  p.H = static_cast<int>(g.height);
  p.W = static_cast<int>(g.width);
  p.K = static_cast<int>(g.out_channels);
  p.R = static_cast<int>(g.kernel_h);
  p.S = static_cast<int>(g.kernel_w);
  p.OH = static_cast<int>(out[0]);
  p.OW = static_cast<int>(out[1]);
  p.sh = static_cast<int>(g.stride_h);
  p.sw = static_cast<int>(g.stride_w);
  p.ph = static_cast<int>(g.pad_h);
  p.pw = static_cast<int>(g.pad_w);
  p.dh = static_cast<int>(g.dilation_h);
  p.dw = static_cast<int>(g.dilation_w);
  p.Cg = static_cast<int>(g.channels / g.groups);
  p.Kg = static_cast<int>(g.out_channels / g.groups);
  p.GM = static_cast<int>(gm);
  p.GK = static_cast<int>(gk);
  const int groups = static_cast<int>(g.groups);
  if (t == 32) launch_conv<32>(p, groups, x, w, bias, y, stream);
  if (t == 64) launch_conv<64>(p, groups, x, w, bias, y, stream);
  if (t == 128) launch_conv<128>(p, groups, x, w, bias, y, stream);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::cuda
