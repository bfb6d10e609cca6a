// Convolutions of small output planes (VGG-11's 3x3 planes on 28x28 images, 2x2, 4x4): one GEMM
// per output position and kernel row over the batch, reading only the taps that meet the input.
//
// im2col + GEMM multiplies every tap at every position. On a 3x3 plane with a 3x3 kernel and
// padding 1, 32 of the 81 position-tap pairs only meet padding: 40% of the GEMM work is zeros.
// Here each output position p computes out[:, :, p] (N, K) from the taps live at p alone. With the
// input channels-last, xt (N, H, W, C), and the weight as wt (K, kh, kw, C), the live taps of one
// kernel row are one contiguous run of both, so each (position, kernel row) is a single GEMM of
// (samples) x K over (live columns)*C, with no gathering: the GEMMs read xt and wt in place (the
// forward reads the weight as (kh, kw, C, K), so that every operand is row-major for
// gemm_fastest).
// Parallel over chunks of samples, one thread's GEMMs each; the weight gradient's GEMMs take the
// whole batch as their depth, the threads splitting the output channels (deterministic whatever
// the thread count).
#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/conv2d_kernels.h"
#include "ops/cpu/gemm.h"
#include "ops/creation.h"

namespace stoke::ops::cpu {
namespace {

// The fewest samples a chunk's GEMMs take as rows (a chunk per thread otherwise).
constexpr int64_t kPositionChunkSamples = 8;

// The taps [lo, hi) of one kernel axis that read the input for output position o.
struct PositionTaps {
  int64_t lo, hi;
};

PositionTaps taps_at(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t in) {
  const int64_t first = o * stride - pad;  // input position of tap 0
  return {std::clamp<int64_t>(-first, 0, k), std::clamp<int64_t>(in - first, 0, k)};
}

// (K, C, kh, kw) <-> (K, kh, kw, C), parallel over K.
template <class T>
void weight_to_taps_last(const ConvGeometry& g, const T* w, T* wt) {
  const int64_t taps = g.kh * g.kw;
  parallel_for(0, g.K, 16, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      transpose_into(w + k * g.C * taps, g.C, taps, taps, wt + k * g.C * taps);
  });
}

// (K, C, kh, kw) -> (kh, kw, C, K): the forward's right-hand operand, row-major over K.
// Per block of 16 output channels: their rows (16, C*kh*kw) transposed into (C*kh*kw, 16) (one
// fast transpose), then each (c, tap)'s 16 values copied to their place in wo. (A direct strided
// copy was 11% of VGG-11's 512->512 layer on 3x3 planes, forward + backward.)
template <class T>
void weight_to_outputs_last(const ConvGeometry& g, const T* w, T* wo) {
  constexpr int64_t kb = 16;
  const int64_t taps = g.kh * g.kw, R = g.C * taps;
  parallel_for(0, (g.K + kb - 1) / kb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> block(static_cast<size_t>(R * kb));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t k0 = b * kb, n = std::min(kb, g.K - k0);
      transpose(w + k0 * R, n, R, R, block.data(), kb);
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t t = 0; t < taps; ++t) {
          const T* src = block.data() + (c * taps + t) * kb;
          std::copy(src, src + n, wo + (t * g.C + c) * g.K + k0);
        }
    }
  });
}

// Calls f(p, i, j0, j1, iy, ix0) for every output position p and each kernel row i with live
// taps there: columns [j0, j1), reading input row iy from column ix0 on.
template <class F>
void for_each_live_row(const ConvGeometry& g, F&& f) {
  for (int64_t oy = 0; oy < g.OH; ++oy) {
    const PositionTaps rows = taps_at(oy, g.sh, g.ph, g.kh, g.H);
    for (int64_t ox = 0; ox < g.OW; ++ox) {
      const PositionTaps cols = taps_at(ox, g.sw, g.pw, g.kw, g.W);
      if (cols.lo >= cols.hi) continue;
      for (int64_t i = rows.lo; i < rows.hi; ++i)
        f(oy * g.OW + ox, i, cols.lo, cols.hi, oy * g.sh - g.ph + i, ox * g.sw - g.pw + cols.lo);
    }
  }
}

}  // namespace

bool position_conv_fits(const ConvGeometry& g) {
  if (g.groups != 1 || g.dh != 1 || g.dw != 1 || g.N < kPositionChunkSamples) return false;
  const int64_t P = g.out_plane();
  if (P < 2 || P > 16) return false;
  // Worth it where a good share of im2col's products would be zeros: live position-tap pairs
  // against all of them.
  int64_t live = 0;
  for_each_live_row(
      g, [&](int64_t, int64_t, int64_t j0, int64_t j1, int64_t, int64_t) { live += j1 - j0; });
  return 10 * live <= 8 * P * g.kh * g.kw;
}

template <class T>
void position_conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* out) {
  const int64_t P = g.out_plane(), HW = g.in_plane(), TI = g.kh * g.kw * g.C;
  Tensor wo = empty({TI * g.K}, {.dtype = dtype_of<T>()});
  weight_to_outputs_last(g, w, wo.data<T>());
  const T* wop = wo.data<T>();
  // Per sample: its input channels-last (H*W*C) and its output positions-first (P*K).
  const int64_t per_sample = HW * g.C + P * g.K;
  Tensor scratch = empty({g.N * per_sample}, {.dtype = dtype_of<T>()});
  T* base = scratch.data<T>();
  T* xt = base;
  T* ot = base + g.N * HW * g.C;
  parallel_chunks(0, g.N, kPositionChunkSamples, [&](int64_t, int64_t n0, int64_t n1) {
    const int64_t nb = n1 - n0;
    for (int64_t n = n0; n < n1; ++n)
      transpose_into(x + n * g.C * HW, g.C, HW, HW, xt + n * HW * g.C);
    T* oc = ot + n0 * P * g.K;
    // Positions without a live tap (if any) hold the bias alone. (The bias test stays outside
    // the vector loop: `bias ? bias[k] : 0` inside becomes a masked load from null, slow on AMD.)
    for (int64_t s = 0; s < nb; ++s)
      for (int64_t p = 0; p < P; ++p) {
        T* o = oc + (s * P + p) * g.K;
        if (bias)
          std::copy(bias, bias + g.K, o);
        else
          std::fill(o, o + g.K, T(0));
      }
    for_each_live_row(g, [&](int64_t p, int64_t i, int64_t j0, int64_t j1, int64_t iy,
                             int64_t ix0) {
      // out_p (nb, K) += xt rows (nb, (j1-j0)*C) · wo rows ((j1-j0)*C, K)
      cpu::gemm_fastest(nb, g.K, (j1 - j0) * g.C, xt + (n0 * HW + iy * g.W + ix0) * g.C, HW * g.C,
                        1, wop + (i * g.kw + j0) * g.C * g.K, g.K, true, oc + p * g.K, P * g.K);
    });
    for (int64_t n = n0; n < n1; ++n)
      transpose_into(ot + n * P * g.K, P, g.K, g.K, out + n * g.K * P);
  });
}

template <class T>
void position_conv_backward(const ConvGeometry& g, const T* gout, const T* x, const T* w, T* gin,
                            T* gw) {
  const int64_t P = g.out_plane(), HW = g.in_plane(), taps = g.kh * g.kw, TI = taps * g.C;
  // Per sample: grad_out positions-first (P*K) and the input, or its gradient, channels-last.
  Tensor scratch = empty({g.N * (P * g.K + HW * g.C)}, {.dtype = dtype_of<T>()});
  T* got = scratch.data<T>();
  T* xt = got + g.N * P * g.K;
  parallel_for(0, g.N, 1, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      transpose_into(gout + n * g.K * P, g.K, P, P, got + n * P * g.K);
      if (gw) transpose_into(x + n * g.C * HW, g.C, HW, HW, xt + n * HW * g.C);
    }
  });
  if (gw) {
    // gwt rows (K, (j1-j0)*C) += gout_pᵀ (K, N) · xt rows (N, (j1-j0)*C), gwt as (K, kh, kw, C):
    // the whole batch is each GEMM's depth and the threads split the output channels. (Chunks of
    // samples, each summing its own partial gradient, gave GEMMs of depth 64 on two cores and a
    // reduction pass after them: VGG-11's 512->512 weight gradient on 3x3 planes took 1.8x the
    // forward's time for the same products.)
    Tensor gwt = zeros({g.K * TI}, {.dtype = dtype_of<T>()});
    T* gwtp = gwt.data<T>();
    parallel_for(0, g.K, 16, [&](int64_t k0, int64_t k1) {
      for_each_live_row(g,
                        [&](int64_t p, int64_t i, int64_t j0, int64_t j1, int64_t iy, int64_t ix0) {
                          cpu::gemm_fastest(k1 - k0, (j1 - j0) * g.C, g.N, got + p * g.K + k0, 1,
                                            P * g.K, xt + (iy * g.W + ix0) * g.C, HW * g.C, true,
                                            gwtp + k0 * TI + (i * g.kw + j0) * g.C, TI);
                        });
      // (K, kh, kw, C) -> (K, C, kh, kw), this thread's output channels.
      for (int64_t k = k0; k < k1; ++k) transpose_into(gwtp + k * TI, taps, g.C, g.C, gw + k * TI);
    });
  }
  if (gin) {
    Tensor wt = empty({g.K * TI}, {.dtype = dtype_of<T>()});
    weight_to_taps_last(g, w, wt.data<T>());
    const T* wtp = wt.data<T>();
    parallel_chunks(0, g.N, kPositionChunkSamples, [&](int64_t, int64_t n0, int64_t n1) {
      const int64_t nb = n1 - n0;
      const T* gc = got + n0 * P * g.K;
      // The input gradient, channels-last, in the same rows the input used.
      T* xc = xt + n0 * HW * g.C;
      std::fill(xc, xc + nb * HW * g.C, T(0));
      for_each_live_row(g,
                        [&](int64_t p, int64_t i, int64_t j0, int64_t j1, int64_t iy, int64_t ix0) {
                          // gin rows (nb, (j1-j0)*C) += gout_p (nb, K) · wt rows (K, (j1-j0)*C)
                          cpu::gemm_fastest(nb, (j1 - j0) * g.C, g.K, gc + p * g.K, P * g.K, 1,
                                            wtp + (i * g.kw + j0) * g.C, TI, true,
                                            xc + (iy * g.W + ix0) * g.C, HW * g.C);
                        });
      for (int64_t n = n0; n < n1; ++n)
        transpose_into(xt + n * HW * g.C, HW, g.C, g.C, gin + n * g.C * HW);
    });
  }
}

template void position_conv_forward<float>(const ConvGeometry&, const float*, const float*,
                                           const float*, float*);
template void position_conv_forward<double>(const ConvGeometry&, const double*, const double*,
                                            const double*, double*);
template void position_conv_backward<float>(const ConvGeometry&, const float*, const float*,
                                            const float*, float*, float*);
template void position_conv_backward<double>(const ConvGeometry&, const double*, const double*,
                                             const double*, double*, double*);

}  // namespace stoke::ops::cpu
