// Convolutions of small output planes (VGG-11's 3x3 planes on 28x28 images, 2x2, 4x4): one GEMM
// per kernel tap and output position over the batch, for the taps that meet the input only.
//
// im2col + GEMM multiplies every tap at every position. On a 3x3 plane with a 3x3 kernel and
// padding 1, 32 of the 81 position-tap pairs only meet padding: 40% of the GEMM work is zeros.
// Here each output position p computes out[:, :, p] (N, K) from the taps live at p alone. With the
// input channels-last, xt (N, H, W, C), and the weight as (kh, kw, C, K), each live (tap,
// position) pair is a single GEMM of (samples) x K over C, with no gathering: the GEMMs read xt
// and the weight in place, every operand row-major for gemm_fastest. The GEMMs run tap by tap, so
// that a tap's C x K weight slice stays in L2 across the positions that use it.
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

// Calls f(p, t, iy, ix) for every kernel tap t = i*kw + j and each output position p where it
// reads the input, at (iy, ix): tap by tap, so that the GEMMs of one tap (its C x K slice of the
// weight, or of the weight gradient) follow each other and reuse that slice from L2. (Per
// position and kernel row, the slices were read from L3 once per position: VGG-11's 512->512
// forward on 3x3 planes ran 7.6-8.6 ms alone and up to 11.4 where the L3 was busier.)
template <class F>
void for_each_tap_position(const ConvGeometry& g, F&& f) {
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      for (int64_t oy = 0; oy < g.OH; ++oy) {
        const int64_t iy = oy * g.sh - g.ph + i;
        if (iy < 0 || iy >= g.H) continue;
        for (int64_t ox = 0; ox < g.OW; ++ox) {
          const int64_t ix = ox * g.sw - g.pw + j;
          if (ix >= 0 && ix < g.W) f(oy * g.OW + ox, i * g.kw + j, iy, ix);
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
  for_each_tap_position(g, [&](int64_t, int64_t, int64_t, int64_t) { ++live; });
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
    for_each_tap_position(g, [&](int64_t p, int64_t t, int64_t iy, int64_t ix) {
      // out_p (nb, K) += xt rows (nb, C) · wo's tap t (C, K)
      cpu::gemm_fastest(nb, g.K, g.C, xt + (n0 * HW + iy * g.W + ix) * g.C, HW * g.C, 1,
                        wop + t * g.C * g.K, g.K, true, oc + p * g.K, P * g.K);
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
      for_each_tap_position(g, [&](int64_t p, int64_t t, int64_t iy, int64_t ix) {
        // gwt's tap t (k1-k0, C) += gout_pᵀ (k1-k0, N) · xt rows (N, C)
        cpu::gemm_fastest(k1 - k0, g.C, g.N, got + p * g.K + k0, 1, P * g.K,
                          xt + (iy * g.W + ix) * g.C, HW * g.C, true, gwtp + k0 * TI + t * g.C, TI);
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
      for_each_tap_position(g, [&](int64_t p, int64_t t, int64_t iy, int64_t ix) {
        // gin rows (nb, C) += gout_p (nb, K) · wt's tap t (K, C)
        cpu::gemm_fastest(nb, g.C, g.K, gc + p * g.K, P * g.K, 1, wtp + t * g.C, TI, true,
                          xc + (iy * g.W + ix) * g.C, HW * g.C);
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
