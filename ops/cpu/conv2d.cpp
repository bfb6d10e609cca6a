// CPU conv2d: im2col + GEMM per group of samples (several samples per GEMM when the output plane
// is small, see samples_per_gemm), parallel over the batch (one scratch column buffer per thread,
// allocated once per call as a Tensor so the caching allocator recycles it), single-threaded GEMM
// inside. When the batch is smaller than the pool, samples run in order and
// each GEMM is split over the pool instead. 1x1 stride-1 unpadded convolutions read the input as
// the column matrix directly; depthwise ones use the direct kernels in conv2d_kernels.cpp; f32
// stride-1 ones take the AVX-512 direct kernels of conv2d_direct.cpp where the CPU and the shape
// suit them, f32 stride-2 ones (and thin stems' forward and weight gradient) the
// channel-blocked kernels of conv2d_blocked.cpp, thin 3x3 stems the row kernels of
// conv2d_thin.cpp; small output
// planes (up to 16 positions) whose kernels hang over the padding take one GEMM per output position
// (conv2d_positions.cpp); 3x3 stride-1 layers with 32+ channels take Winograd F(2x2, 3x3), their
// backward from 16 channels (conv2d_winograd.cpp, see winograd_fits). Kernel taps that only ever
// meet padding are cut off first (live_conv).
#include <algorithm>
#include <type_traits>

#include "core/parallel.h"
#include "ops/check.h"
#include "ops/conv2d.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/conv2d_kernels.h"
#include "ops/cpu/gemm.h"
#include "ops/creation.h"

namespace stoke::ops::cpu {
namespace {

// The geometry of a convolution the entry point has checked (ops/conv2d.cpp).
ConvGeometry geometry_of(const Tensor& input, const Tensor& weight, const Conv2dOptions& o) {
  ConvGeometry g{};
  g.N = input.size(0);
  g.C = input.size(1);
  g.H = input.size(2);
  g.W = input.size(3);
  g.K = weight.size(0);
  g.kh = weight.size(2);
  g.kw = weight.size(3);
  const auto out = conv2d_output_size({g.H, g.W}, {g.kh, g.kw}, o);
  g.OH = out[0];
  g.OW = out[1];
  g.sh = o.stride[0];
  g.sw = o.stride[1];
  g.ph = o.padding[0];
  g.pw = o.padding[1];
  g.dh = o.dilation[0];
  g.dw = o.dilation[1];
  g.groups = o.groups;
  return g;
}

bool is_depthwise(const ConvGeometry& g) {
  return g.groups > 1 && g.groups == g.C && g.K == g.C;
}

// A 1x1, stride-1 convolution with no padding whose output plane is the input plane: the input is
// already the column matrix. (The last condition matters for the trimmed geometries below, whose
// padding may be one-sided.)
bool is_pointwise(const ConvGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
         g.OH == g.H && g.OW == g.W;
}

// The kernel taps [lo, hi) along one axis that read the input for at least one output position
// (their hull); the others only ever meet padding.
struct TapRange {
  int64_t lo, hi;
};

TapRange live_taps(int64_t k, int64_t dilation, int64_t stride, int64_t pad, int64_t in,
                   int64_t out) {
  TapRange r{k, 0};
  for (int64_t t = 0; t < k; ++t) {
    const int64_t off = t * dilation - pad;  // input position of output 0
    const int64_t first = off >= 0 ? 0 : (-off + stride - 1) / stride;
    const int64_t end = in - off <= 0 ? 0 : std::min(out, (in - off + stride - 1) / stride);
    if (first < end) {
      r.lo = std::min(r.lo, t);
      r.hi = t + 1;
    }
  }
  if (r.lo >= r.hi) return {0, k};  // no tap reads anything: the output is the bias alone
  return r;
}

// A convolution cut down to the kernel taps that can read the input. A 3x3 "same" convolution on
// a 1x1 plane (VGG's last stage on 28x28 images) only ever reads its center tap: its column matrix
// would be 8/9 padding zeros and its GEMMs 9x the work (measured 0.27x torch's speed there).
// Cut down, it is a 1x1 convolution with the center slice of the weight. The geometry keeps the
// output size and moves the padding by the taps dropped (possibly one-sided: im2col only uses
// ph/pw as the offset of tap 0 and checks both ends against the input).
struct LiveConv {
  ConvGeometry g;
  int64_t i0 = 0, j0 = 0;  // the first live tap (row, column) of the full kernel
  bool trimmed = false;
};

LiveConv live_conv(const ConvGeometry& g) {
  LiveConv l{g};
  if (is_depthwise(g)) return l;  // the direct depthwise kernels skip the padding themselves
  const TapRange rows = live_taps(g.kh, g.dh, g.sh, g.ph, g.H, g.OH);
  const TapRange cols = live_taps(g.kw, g.dw, g.sw, g.pw, g.W, g.OW);
  if (rows.hi - rows.lo == g.kh && cols.hi - cols.lo == g.kw) return l;
  l.trimmed = true;
  l.i0 = rows.lo;
  l.j0 = cols.lo;
  l.g.kh = rows.hi - rows.lo;
  l.g.kw = cols.hi - cols.lo;
  l.g.ph = g.ph - rows.lo * g.dh;
  l.g.pw = g.pw - cols.lo * g.dw;
  return l;
}

// The live taps' slice of the weight (K, Cg, kh', kw'), contiguous.
Tensor live_weight(const Tensor& w, const LiveConv& l) {
  if (!l.trimmed) return w;
  return w.narrow(2, l.i0, l.g.kh).narrow(3, l.j0, l.g.kw).contiguous();
}

// Samples per GEMM. Small output planes (ResNet's 14x14 and 7x7, LeNet's 10x10) make short,
// inefficient GEMMs, so b samples' columns are laid side by side, (R, b*P), and multiplied at once
// (N = b*P for the forward and input gradient, K = b*P for the weight gradient). b depends only on
// the geometry, so results stay reproducible. Measured on this machine's OpenBLAS (one thread):
// M=64 K=576 P=49 goes from 93 to 129 GFLOP/s with b = 8, M=16 K=150 P=100 (LeNet's conv2) from
// 104 to ~160 with b = 4; at P = 196 the gain (~5%) did not pay for the extra copies, and at
// P = 784 batching only hurts. So planes above 128 outputs stay one sample per GEMM. Pointwise
// convolutions batch the same way (their columns are a copy of the input rather than the input in
// place): MobileNetV2's 1x1 layers on 7x7 and smaller planes, +8% training img/s measured.
int64_t samples_per_gemm(const ConvGeometry& g) {
  const int64_t P = g.out_plane();
  if (g.groups > 1 || P > 128) return 1;
  return std::clamp<int64_t>(400 / std::max<int64_t>(1, P), 1, 16);
}

// f32 convolutions with a spatial kernel, stride 1 and one group run the direct kernels
// (conv2d_direct.cpp) where the CPU has AVX-512 and the shape suits them: forward and input
// gradient without the column matrix; the weight gradient too where its per-task partial sums
// stay small (ResNet's layers; VGG's wide ones keep im2col + GEMM). (With the blocked kernels
// off, STOKE_CONV_BLOCKED=0, stride-2 forwards run the direct kernel over phase grids.)
template <class T>
bool direct_forward(const ConvGeometry& g) {
  return std::is_same_v<T, float> && !is_pointwise(g) && cpu::direct_conv_forward_fits(g);
}

// The channel-blocked kernels (conv2d_blocked.cpp, CPUs with AVX-512) take f32 layers with a
// spatial kernel that are strided (ResNet's 3x3 downsampling layers), forward and backward:
// ResNet-8's two such layers forward 1.0-1.1 -> 0.62 ms and 0.94 -> 0.58, forward + backward
// 3.1-3.3 -> 2.2-2.3 and 2.4-2.6 -> 1.9-2.0 (interleaved runs); and the forward and weight
// gradient of stride-1 layers too thin for the direct kernels (a 1-channel stem: fewer than 64
// multiply-adds per output), which im2col + GEMM ran at a third of the blocked kernels' speed.
// 1x1 stride-2 layers stay on im2col + GEMM (0.20 against the blocked kernel's 0.23-0.26 ms),
// wider stride-1 layers on the direct and Winograd kernels (the blocked forward measured level
// with the direct one on 16 channels).
bool blocked_thin_layer(const ConvGeometry& g) {
  return g.sh == 1 && g.sw == 1 && g.C * g.kh * g.kw < 64 && !cpu::direct_conv_forward_fits(g);
}

// (A thin layer's forward with more than 32 output channels stays on GEMM: VGG-11's 64-channel
// stem measured 0.84-0.93 ms blocked against 0.75-0.77, its weight gradient faster blocked.)
template <class T>
bool blocked_forward(const ConvGeometry& g) {
  return std::is_same_v<T, float> && g.kh * g.kw > 1 && cpu::blocked_conv_fits(g) &&
         (g.sh == 2 || (blocked_thin_layer(g) && g.K <= 32));
}

// Thin 3x3 stride-1 layers (at most 7 input channels: the stems) with up to 32 output channels
// run conv2d_thin.cpp's row kernels forward, which write the output directly (the blocked kernels
// transpose it from a buffer): ResNet-8's 1 -> 16 stem 0.161 -> 0.129 ms, `--op conv2d`'s 1 -> 32
// 0.136 -> 0.121. VGG-11's 1 -> 64 stem stays on GEMM: level forward (0.51-0.75 against
// 0.69-0.76 ms, its 26 MB output near the L3's size), and its forward + backward measured slower.
template <class T>
bool thin_forward(const ConvGeometry& g) {
  return std::is_same_v<T, float> && g.K <= 32 && cpu::thin_conv_fits(g);
}

// Their weight gradient too, at any width (VGG-11's 64-channel stem included), reading grad_out
// in place (the blocked kernel transposes it per sample).
template <class T>
bool thin_backward_weight(const ConvGeometry& g) {
  return std::is_same_v<T, float> && cpu::thin_conv_fits(g);
}

template <class T>
bool blocked_backward_input(const ConvGeometry& g) {
  return std::is_same_v<T, float> && g.kh * g.kw > 1 && g.sh == 2 && cpu::blocked_conv_fits(g);
}

template <class T>
bool blocked_backward_weight(const ConvGeometry& g) {
  return std::is_same_v<T, float> && g.kh * g.kw > 1 && cpu::blocked_conv_fits(g) &&
         (g.sh == 2 || blocked_thin_layer(g));
}

template <class T>
bool direct_backward_input(const ConvGeometry& g) {
  return std::is_same_v<T, float> && !is_pointwise(g) && cpu::direct_conv_backward_input_fits(g);
}

template <class T>
bool direct_backward_weight(const ConvGeometry& g) {
  return std::is_same_v<T, float> && !is_pointwise(g) && cpu::direct_conv_backward_weight_fits(g);
}

// Winograd F(2x2, 3x3) (conv2d_winograd.cpp) for f32 3x3 stride-1 layers with 32+ channels in
// and out: 16 multiplies per 2x2 outputs instead of 36. Measured faster than the direct kernels
// and im2col + GEMM forward + backward on every such layer tried (ResNet's and VGG-11's, 32-512
// channels on 5x5 to 28x28 planes; docs/design-notes.md). With 16 channels only the backward is
// faster (winograd_backward_fits): the direct kernels keep the forward.
template <class T>
bool winograd_fits(const ConvGeometry& g) {
  return std::is_same_v<T, float> && cpu::winograd_conv_fits(g);
}

template <class T>
bool winograd_backward_fits(const ConvGeometry& g) {
  return std::is_same_v<T, float> && cpu::winograd_conv_backward_fits(g);
}

// A pointwise convolution of 1x1 planes (VGG's last stage, cut down to its center tap) is a linear
// layer: one GEMM over the whole batch, out (N, K) = x (N, C) · Wᵀ, split over the pool by gemm,
// instead of N matrix-vector products.
bool is_linear(const ConvGeometry& g) {
  return is_pointwise(g) && g.groups == 1 && g.out_plane() == 1;
}

template <class T>
void forward_linear(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* out) {
  cpu::gemm(false, true, g.N, g.K, g.C, T(1), x, g.C, w, g.C, T(0), out, g.K);
  if (bias)
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t k = 0; k < g.K; ++k) out[n * g.K + k] += bias[k];
}

// dx (N, C) = gout (N, K) · W; dW (K, C) = goutᵀ · x.
template <class T>
void backward_linear(const ConvGeometry& g, const T* gout, const T* x, const T* w, T* gin, T* gw) {
  if (gin) cpu::gemm(false, false, g.N, g.C, g.K, T(1), gout, g.K, w, g.C, T(0), gin, g.C);
  if (gw) cpu::gemm(true, false, g.K, g.C, g.N, T(1), gout, g.K, x, g.C, T(0), gw, g.C);
}

// Whether a chunk's product of m x n over depth runs stoke's AVX-512 GEMM (gemm_fastest, where
// OpenBLAS runs narrower kernels; elsewhere OpenBLAS keeps its own forms, the weight gradient's
// transposed operand read in place): f32, the chunks running in parallel, each on one thread (one
// chunk alone keeps cpu::gemm, which splits a large product over the pool), and a product that
// fills whole register tiles (12 x 32; ResNet-8's stem, R = 9 and K = 16, ran its weight gradient
// at half speed through it).
template <class T>
bool chunk_gemm_fastest(bool parallel, int64_t m, int64_t n, int64_t depth) {
  return std::is_same_v<T, float> && cpu::gemm_fastest_runs_avx512() && parallel && m >= 24 &&
         n >= 32 && depth >= 32;
}

// A chunk's product C (m, n) = op(A) · B, or C += op(A) · B when accumulate, B row-major.
template <class T>
void chunk_gemm(bool parallel, bool trans_a, int64_t m, int64_t n, int64_t k, const T* a,
                int64_t lda, const T* b, int64_t ldb, bool accumulate, T* c, int64_t ldc) {
  if (chunk_gemm_fastest<T>(parallel, m, n, k))
    return cpu::gemm_fastest(m, n, k, a, trans_a ? 1 : lda, trans_a ? lda : 1, b, ldb, accumulate,
                             c, ldc);
  cpu::gemm(trans_a, false, m, n, k, T(1), a, lda, b, ldb, accumulate ? T(1) : T(0), c, ldc);
}

// dWᵀ (R, K) (+)= cols (R, P) · goutᵀ (P, K), gout (K, P) with rows ld_gout apart: gemm_fastest
// needs goutᵀ row-major, so it is transposed into gt first; OpenBLAS reads it transposed in place.
template <class T>
void chunk_weight_grad(bool parallel, int64_t R, int64_t K, int64_t P, const T* cols,
                       int64_t ld_cols, const T* gout, int64_t ld_gout, T* gt, bool accumulate,
                       T* dwt, int64_t ld_dwt) {
  if (chunk_gemm_fastest<T>(parallel, R, K, P)) {
    transpose_into(gout, K, P, ld_gout, gt);
    cpu::gemm_fastest(R, K, P, cols, ld_cols, 1, gt, K, accumulate, dwt, ld_dwt);
  } else {
    cpu::gemm(false, true, R, K, P, T(1), cols, ld_cols, gout, ld_gout, accumulate ? T(1) : T(0),
              dwt, ld_dwt);
  }
}

template <class T>
void forward_gemm(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* out) {
  if (is_linear(g)) return forward_linear(g, x, w, bias, out);
  const int64_t P = g.out_plane(), R = g.col_rows(), Kg = g.Kg();
  const int64_t b = samples_per_gemm(g);
  // One sample of a pointwise convolution reads its input as the column matrix in place.
  const bool pointwise = is_pointwise(g) && b == 1;
  const int64_t batches = (g.N + b - 1) / b;
  const int64_t chunks = parallel_chunk_count(batches, 1);
  // Per chunk: the column matrix (R, b*P) and, when b > 1, the GEMM's output (K, b*P).
  const int64_t per_chunk = (pointwise ? 0 : R * b * P) + (b > 1 ? g.K * b * P : 0);
  Tensor scratch;
  if (per_chunk > 0) scratch = empty({chunks, per_chunk}, {.dtype = dtype_of<T>()});
  parallel_chunks(0, batches, 1, [&](int64_t chunk, int64_t i0, int64_t i1) {
    T* col = per_chunk > 0 ? scratch.data<T>() + chunk * per_chunk : nullptr;
    T* tmp = pointwise ? col : col + R * b * P;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t n0 = i * b, nb = std::min(b, g.N - n0), ld = nb * P;
      if (b == 1) {
        T* on = out + n0 * g.K * P;
        if (bias)
          for (int64_t k = 0; k < g.K; ++k) std::fill(on + k * P, on + (k + 1) * P, bias[k]);
        for (int64_t gr = 0; gr < g.groups; ++gr) {
          const T* xg = x + (n0 * g.C + gr * g.Cg()) * g.in_plane();
          const T* cols = xg;
          if (!pointwise) {
            cpu::im2col(g, xg, col, P);
            cols = col;
          }
          chunk_gemm(chunks > 1, false, Kg, P, R, w + gr * Kg * R, R, cols, P, bias != nullptr,
                     on + gr * Kg * P, P);
        }
        continue;
      }
      for (int64_t s = 0; s < nb; ++s)
        cpu::im2col(g, x + (n0 + s) * g.C * g.in_plane(), col + s * P, ld);
      chunk_gemm(chunks > 1, false, g.K, ld, R, w, R, col, ld, false, tmp, ld);
      // (K, nb*P) -> (nb, K, P), adding the bias on the way.
      for (int64_t s = 0; s < nb; ++s)
        for (int64_t k = 0; k < g.K; ++k) {
          const T* src = tmp + k * ld + s * P;
          T* dst = out + ((n0 + s) * g.K + k) * P;
          const T bk = bias ? bias[k] : T(0);
          for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + bk;
        }
    }
  });
}

template <class T>
void backward_gemm(const ConvGeometry& g, const T* gout, const T* x, const T* w, T* gin, T* gw) {
  if (is_linear(g)) return backward_linear(g, gout, x, w, gin, gw);
  const int64_t P = g.out_plane(), R = g.col_rows(), Kg = g.Kg(), Cg = g.Cg();
  const int64_t b = samples_per_gemm(g);
  // One sample of a pointwise convolution reads its input as the column matrix in place.
  const bool pointwise = is_pointwise(g) && b == 1;
  const int64_t batches = (g.N + b - 1) / b;
  const int64_t chunks = parallel_chunk_count(batches, 1);
  // Per chunk: the column matrix (R, b*P); when b > 1, the gathered grad_out (K, b*P); for the
  // weight gradient, grad_out transposed (b*P, K), the weight gradient's right-hand operand.
  const int64_t col_len = pointwise ? 0 : R * b * P, gbuf_len = b > 1 ? g.K * b * P : 0;
  const int64_t per_chunk = col_len + gbuf_len + (gw ? g.K * b * P : 0);
  Tensor scratch, partial;
  if (per_chunk > 0) scratch = empty({chunks, per_chunk}, {.dtype = dtype_of<T>()});
  // Each chunk sums its samples' weight gradients into its own buffer; the buffers are added in
  // chunk order afterwards, so the result does not depend on thread timing. A chunk holds each
  // group's gradient transposed, (R, Kg): OpenBLAS runs the product with R = Cg*kh*kw output rows
  // faster than the one with Kg (one thread here, ResNet-8's shapes: SkylakeX kernels
  // 1.12-1.42x, Haswell's 1.08-1.18x, Zen's level), so dWᵀ = cols · goutᵀ is computed and
  // transposed once at the end.
  // (Not zeroed: each chunk's first product overwrites its buffer, beta = 0.)
  if (gw) partial = empty({chunks, g.K * R}, {.dtype = dtype_of<T>()});
  parallel_chunks(0, batches, 1, [&](int64_t chunk, int64_t i0, int64_t i1) {
    T* col = per_chunk > 0 ? scratch.data<T>() + chunk * per_chunk : nullptr;
    T* gbuf = col + col_len;
    T* gt = gbuf + gbuf_len;
    T* gwp = gw ? partial.data<T>() + chunk * g.K * R : nullptr;
    if (gwp && i0 == i1) std::fill(gwp, gwp + g.K * R, T(0));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t n0 = i * b, nb = std::min(b, g.N - n0), ld = nb * P;
      if (b > 1) {
        // (nb, K, P) -> (K, nb*P): the layout of the batched GEMMs.
        for (int64_t s = 0; s < nb; ++s)
          for (int64_t k = 0; k < g.K; ++k)
            std::copy_n(gout + ((n0 + s) * g.K + k) * P, P, gbuf + k * ld + s * P);
        if (gwp) {
          for (int64_t s = 0; s < nb; ++s)
            cpu::im2col(g, x + (n0 + s) * g.C * g.in_plane(), col + s * P, ld);
          // dWᵀ (R, K) += cols (R, nb*P) · goutᵀ (nb*P, K)
          chunk_weight_grad(chunks > 1, R, g.K, ld, col, ld, gbuf, ld, gt, i > i0, gwp, g.K);
        }
        if (gin) {
          chunk_gemm(chunks > 1, true, R, ld, g.K, w, R, gbuf, ld, false, col, ld);
          for (int64_t s = 0; s < nb; ++s) {
            T* gs = gin + (n0 + s) * g.C * g.in_plane();
            std::fill(gs, gs + g.C * g.in_plane(), T(0));
            cpu::col2im(g, col + s * P, gs, ld);
          }
        }
        continue;
      }
      const int64_t n = n0;
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const T* gog = gout + (n * g.K + gr * Kg) * P;
        const T* wg = w + gr * Kg * R;
        const int64_t in_off = (n * g.C + gr * Cg) * g.in_plane();
        if (gwp) {
          const T* cols = x + in_off;
          if (!pointwise) {
            cpu::im2col(g, x + in_off, col, P);
            cols = col;
          }
          // dW_gᵀ (R, Kg) += cols (R, P) · gout_gᵀ (P, Kg)
          chunk_weight_grad(chunks > 1, R, Kg, P, cols, P, gog, P, gt, i > i0, gwp + gr * Kg * R,
                            Kg);
        }
        if (gin) {
          // cols (R, P) = W_gᵀ (R, Kg) · gout_g (Kg, P), scattered back by col2im.
          if (pointwise) {
            chunk_gemm(chunks > 1, true, R, P, Kg, wg, R, gog, P, false, gin + in_off, P);
          } else {
            chunk_gemm(chunks > 1, true, R, P, Kg, wg, R, gog, P, false, col, P);
            std::fill(gin + in_off, gin + in_off + Cg * g.in_plane(), T(0));
            cpu::col2im(g, col, gin + in_off, P);
          }
        }
      }
    }
  });
  if (gw) {
    // gw[gr*Kg + k][r] = sum over chunks, in chunk order, of their dW_gᵀ[r][k]. Parallel over
    // blocks of kTransposeRows rows r: each task reads a (rows, Kg) band of every chunk and
    // writes its band of gw's rows in runs of kTransposeRows (VGG's 512x4608 gradients made this
    // a visible serial step).
    constexpr int64_t kTransposeRows = 32;
    const T* pp = partial.data<T>();
    const int64_t len = g.K * R, blocks = (R + kTransposeRows - 1) / kTransposeRows;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kTransposeRows * Kg));
    parallel_for(0, g.groups * blocks, grain, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t gr = t / blocks, r0 = (t % blocks) * kTransposeRows;
        const int64_t r1 = std::min(R, r0 + kTransposeRows);
        for (int64_t k = 0; k < Kg; ++k) {
          T* dst = gw + (gr * Kg + k) * R;
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t src = gr * Kg * R + r * Kg + k;
            T s = pp[src];
            for (int64_t c = 1; c < chunks; ++c) s += pp[c * len + src];
            dst[r] = s;
          }
        }
      }
    });
  }
}

}  // namespace

Tensor CpuBackend::conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                          const Conv2dOptions& options) {
  check_float("conv2d", input_in, "input");
  const ConvGeometry g = geometry_of(input_in, weight_in, options);
  const LiveConv live = live_conv(g);
  const Tensor x = input_in.detach().contiguous();
  const Tensor w = live_weight(weight_in.detach().contiguous(), live);
  const Tensor b = bias_in.defined() ? bias_in.detach().contiguous() : Tensor();
  Tensor out = empty({g.N, g.K, g.OH, g.OW}, {.dtype = x.dtype()});
  if (out.numel() == 0) return out;
  dispatch_float(x.dtype(), "conv2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* bp = b.defined() ? b.data<T>() : nullptr;
    if (is_depthwise(g))
      cpu::depthwise_forward(g, x.data<T>(), w.data<T>(), bp, out.data<T>());
    else if (cpu::position_conv_fits(live.g))
      cpu::position_conv_forward(live.g, x.data<T>(), w.data<T>(), bp, out.data<T>());
    else if (winograd_fits<T>(live.g))
      cpu::winograd_conv_forward(live.g, x.data<float>(), w.data<float>(),
                                 b.defined() ? b.data<float>() : nullptr, out.data<float>());
    else if (thin_forward<T>(live.g))
      cpu::thin_conv_forward(live.g, x.data<float>(), w.data<float>(),
                             b.defined() ? b.data<float>() : nullptr, out.data<float>());
    else if (blocked_forward<T>(live.g))
      cpu::blocked_conv_forward(live.g, x.data<float>(), w.data<float>(),
                                b.defined() ? b.data<float>() : nullptr, out.data<float>());
    else if (direct_forward<T>(live.g))
      cpu::direct_conv_forward(live.g, x.data<float>(), w.data<float>(),
                               b.defined() ? b.data<float>() : nullptr, out.data<float>());
    else
      forward_gemm(live.g, x.data<T>(), w.data<T>(), bp, out.data<T>());
  });
  return out;
}

Conv2dGrads CpuBackend::conv2d_backward(const Tensor& grad_out_in, const Tensor& input_in,
                                        const Tensor& weight_in, const Conv2dOptions& options,
                                        bool need_input, bool need_weight, bool need_bias) {
  check_float("conv2d_backward", input_in, "input");
  const ConvGeometry g = geometry_of(input_in, weight_in, options);
  const Tensor gout = grad_out_in.detach().contiguous();
  Conv2dGrads r;
  if (need_input) r.grad_input = empty(input_in.shape(), {.dtype = input_in.dtype()});
  if (need_weight) r.grad_weight = empty(weight_in.shape(), {.dtype = weight_in.dtype()});
  if (need_bias) r.grad_bias = conv2d_backward_bias(gout);
  if (!need_input && !need_weight) return r;
  if (g.N == 0) {
    if (need_weight) fill_(r.grad_weight, 0);
    return r;
  }
  const LiveConv live = live_conv(g);
  const Tensor x = input_in.detach().contiguous();
  const Tensor w = live_weight(weight_in.detach().contiguous(), live);
  // The live taps' weight gradient; the dead taps' gradient is zero.
  Tensor live_gw =
      need_weight && live.trimmed ? empty(w.shape(), {.dtype = w.dtype()}) : r.grad_weight;
  dispatch_float(x.dtype(), "conv2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* gin = need_input ? r.grad_input.data<T>() : nullptr;
    T* gw = need_weight ? live_gw.data<T>() : nullptr;
    if (is_depthwise(g)) {
      if (gin) cpu::depthwise_backward_input(g, gout.data<T>(), w.data<T>(), gin);
      if (gw) cpu::depthwise_backward_weight(g, gout.data<T>(), x.data<T>(), gw);
    } else if (cpu::position_conv_fits(live.g)) {
      cpu::position_conv_backward(live.g, gout.data<T>(), x.data<T>(), w.data<T>(), gin, gw);
    } else if (winograd_backward_fits<T>(live.g)) {
      cpu::winograd_conv_backward(live.g, gout.data<float>(), x.data<float>(), w.data<float>(),
                                  need_input ? r.grad_input.data<float>() : nullptr,
                                  need_weight ? live_gw.data<float>() : nullptr);
    } else if (thin_backward_weight<T>(live.g) || blocked_backward_input<T>(live.g) ||
               blocked_backward_weight<T>(live.g) || direct_backward_input<T>(live.g) ||
               direct_backward_weight<T>(live.g)) {
      const bool blocked_in = gin && blocked_backward_input<T>(live.g);
      const bool direct_in = gin && !blocked_in && direct_backward_input<T>(live.g);
      const bool thin_w = gw && thin_backward_weight<T>(live.g);
      const bool blocked_w = gw && !thin_w && blocked_backward_weight<T>(live.g);
      const bool direct_w = gw && !blocked_w && direct_backward_weight<T>(live.g);
      if (blocked_in)
        cpu::blocked_conv_backward_input(live.g, gout.data<float>(), w.data<float>(),
                                         r.grad_input.data<float>());
      if (direct_in)
        cpu::direct_conv_backward_input(live.g, gout.data<float>(), w.data<float>(),
                                        r.grad_input.data<float>());
      if (thin_w)
        cpu::thin_conv_backward_weight(live.g, gout.data<float>(), x.data<float>(),
                                       live_gw.data<float>());
      if (blocked_w)
        cpu::blocked_conv_backward_weight(live.g, gout.data<float>(), x.data<float>(),
                                          live_gw.data<float>());
      if (direct_w)
        cpu::direct_conv_backward_weight(live.g, gout.data<float>(), x.data<float>(),
                                         live_gw.data<float>());
      const bool own_in = blocked_in || direct_in, own_w = thin_w || blocked_w || direct_w;
      if ((gin && !own_in) || (gw && !own_w))
        backward_gemm<T>(live.g, gout.data<T>(), x.data<T>(), w.data<T>(), own_in ? nullptr : gin,
                         own_w ? nullptr : gw);
    } else {
      backward_gemm(live.g, gout.data<T>(), x.data<T>(), w.data<T>(), gin, gw);
    }
  });
  if (need_weight && live.trimmed) {
    fill_(r.grad_weight, 0);
    r.grad_weight.narrow(2, live.i0, live.g.kh).narrow(3, live.j0, live.g.kw).copy_(live_gw);
  }
  return r;
}

// The CPU's own kernel (the CUDA backend sums with its reduction): one channel per task, the batch
// summed in order (deterministic).
Tensor CpuBackend::conv2d_backward_bias(const Tensor& grad_out_in) {
  check_float("conv2d_backward_bias", grad_out_in, "grad_out");
  const Tensor gout = grad_out_in.detach().contiguous();
  const int64_t N = gout.size(0), K = gout.size(1), P = gout.size(2) * gout.size(3);
  Tensor out = empty({K}, {.dtype = gout.dtype()});
  dispatch_float(gout.dtype(), "conv2d_backward_bias", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = gout.data<T>();
    T* op = out.data<T>();
    // One channel per task, summing the batch in order: deterministic and race-free.
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, N * P));
    parallel_for(0, K, grain, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        T s = 0;
        for (int64_t n = 0; n < N; ++n) s += cpu::sum_contiguous(gp + (n * K + k) * P, P);
        op[k] = s;
      }
    });
  });
  return out;
}

}  // namespace stoke::ops::cpu
