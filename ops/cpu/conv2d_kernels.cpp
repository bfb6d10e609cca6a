#include "ops/cpu/conv2d_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace stoke::ops::cpu {
namespace {

// Output positions o in [lo, hi) read input positions o*stride + off inside [0, size); the rest
// of [0, out) fall in the padding.
struct Range {
  int64_t lo, hi;
};

Range valid_range(int64_t off, int64_t stride, int64_t size, int64_t out) {
  int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  int64_t hi = size - off <= 0 ? 0 : (size - off + stride - 1) / stride;
  hi = std::min(hi, out);
  lo = std::min(lo, hi);
  return {lo, hi};
}

// Valid output-column range for each kernel column j (independent of the row).
std::vector<Range> column_ranges(const ConvGeometry& g) {
  std::vector<Range> r(static_cast<size_t>(g.kw));
  for (int64_t j = 0; j < g.kw; ++j) r[j] = valid_range(j * g.dw - g.pw, g.sw, g.W, g.OW);
  return r;
}

// Zeroes the padding columns [0, r.lo) and [r.hi, OW) of output rows [rows.lo, rows.hi) in one
// tap's row of col. Rows are often only 7-28 elements long and fringes 1-2 columns wide, where a
// libc call per row (which GCC makes of a contiguous zeroing loop) costs more than the work, so
// the fringe is zeroed column by column: a strided loop that stays inline.
template <class T>
void zero_fringe(const ConvGeometry& g, Range rows, Range r, T* dst) {
  for (int64_t ow = 0; ow < r.lo; ++ow)
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) dst[oh * g.OW + ow] = T(0);
  for (int64_t ow = r.hi; ow < g.OW; ++ow)
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) dst[oh * g.OW + ow] = T(0);
}

// Short-row helpers for the unit-column-stride paths. Rows of an im2col tap are 5-28 elements,
// where a runtime-length loop runs mostly in its scalar remainder and a libc call costs more than
// the copy: copy_short moves whole 32-byte vectors and covers the tail with one overlapping
// vector (copies are idempotent), or with AVX-512 one masked vector; add_short adds 8-element
// blocks with a compile-time trip count and the rest element by element (a masked add was 2x
// slower: col2im's consecutive taps update overlapping runs of the same row, and a masked store
// does not forward to the next tap's shifted load). GCC's loop distribution would turn the vector
// loop and the padding-zero loops back into memmove/memset calls (measured: a third of im2col's
// time), so the functions that use them are compiled without it.
#if defined(__GNUC__) && !defined(__clang__)
#define STOKE_NO_LIBC_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define STOKE_NO_LIBC_LOOPS
#endif

template <class T>
STOKE_NO_LIBC_LOOPS inline void copy_short(T* __restrict d, const T* __restrict s, int64_t n) {
#if defined(__AVX512F__)
  // f32 rows take 16-lane vectors and the tail one masked load/store: a 10-wide row (LeNet's
  // conv2) is one store instead of two overlapping ones, and stores bound im2col (-25% measured).
  if constexpr (std::is_same_v<T, float>) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) _mm512_storeu_ps(d + k, _mm512_loadu_ps(s + k));
    if (k < n) {
      const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1);
      _mm512_mask_storeu_ps(d + k, m, _mm512_maskz_loadu_ps(m, s + k));
    }
    return;
  }
#endif
  constexpr int64_t B = 32 / sizeof(T);
  if (n >= B) {
    int64_t k = 0;
    for (; k + B <= n; k += B) std::memcpy(d + k, s + k, 32);
    if (k < n) std::memcpy(d + n - B, s + n - B, 32);
    return;
  }
  for (int64_t k = 0; k < n; ++k) d[k] = s[k];
}

template <class T>
STOKE_NO_LIBC_LOOPS inline void add_short(T* __restrict d, const T* __restrict s, int64_t n) {
  constexpr int64_t B = 32 / sizeof(T);
  int64_t k = 0;
  for (; k + B <= n; k += B)
    for (int64_t t = 0; t < B; ++t) d[k + t] += s[k + t];
  for (; k < n; ++k) d[k] += s[k];
}

// Stride-1, dilation-1 columns (the common 3x3 and 5x5 convolutions). Per (channel, kernel row,
// kernel column) the valid output rows and columns are fixed, so each output row is one short copy
// of a contiguous input run, plus 0-2 padding zeros at each end. Kept out of line with few live
// values: inlined into the generic loop nest, the copies ran with spilled induction variables.
template <class T>
[[gnu::noinline]] STOKE_NO_LIBC_LOOPS void im2col_unit_w(const ConvGeometry& g, const T* x, T* col,
                                                         int64_t ld) {
  const int64_t P = g.out_plane(), OW = g.OW, W = g.W;
  for (int64_t c = 0; c < g.Cg(); ++c) {
    const T* xc = x + c * g.in_plane();
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih0 = i * g.dh - g.ph;
      const Range rows = valid_range(ih0, g.sh, g.H, g.OH);
      const int64_t row_step = g.sh * W;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t off = j - g.pw;
        const Range r = valid_range(off, 1, W, OW);
        T* dst = col + ((c * g.kh + i) * g.kw + j) * ld;
        if (rows.lo >= rows.hi || r.lo >= r.hi) {
          std::fill(dst, dst + P, T(0));
          continue;
        }
        if (rows.lo > 0) std::memset(dst, 0, sizeof(T) * rows.lo * OW);
        if (rows.hi < g.OH) std::memset(dst + rows.hi * OW, 0, sizeof(T) * (P - rows.hi * OW));
        const T* src = xc + (rows.lo * g.sh + ih0) * W + off;
        const int64_t n = r.hi - r.lo;
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh, src += row_step) {
          T* d = dst + oh * OW;
          for (int64_t ow = 0; ow < r.lo; ++ow) d[ow] = T(0);
          copy_short(d + r.lo, src + r.lo, n);
          for (int64_t ow = r.hi; ow < OW; ++ow) d[ow] = T(0);
        }
      }
    }
  }
}

// The adjoint of im2col_unit_w: each valid output row adds a short run into an input row.
template <class T>
[[gnu::noinline]] STOKE_NO_LIBC_LOOPS void col2im_unit_w(const ConvGeometry& g, const T* col, T* x,
                                                         int64_t ld) {
  const int64_t OW = g.OW, W = g.W;
  for (int64_t c = 0; c < g.Cg(); ++c) {
    T* xc = x + c * g.in_plane();
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih0 = i * g.dh - g.ph;
      const Range rows = valid_range(ih0, g.sh, g.H, g.OH);
      const int64_t row_step = g.sh * W;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t off = j - g.pw;
        const Range r = valid_range(off, 1, W, OW);
        if (rows.lo >= rows.hi || r.lo >= r.hi) continue;
        const T* src = col + ((c * g.kh + i) * g.kw + j) * ld + r.lo;
        T* dst = xc + (rows.lo * g.sh + ih0) * W + off + r.lo;
        const int64_t n = r.hi - r.lo;
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh, dst += row_step)
          add_short(dst, src + oh * OW, n);
      }
    }
  }
}

}  // namespace

bool conv_kernel_enabled(const char* env_switch, bool needs_avx512) {
  const char* env = std::getenv(env_switch);
  if (env && std::strcmp(env, "0") == 0) return false;
  return !needs_avx512 || __builtin_cpu_supports("avx512f") != 0;
}

// The generic paths loop over kernel taps (i, j) outside and channels inside, so the valid ranges
// (integer divisions) are computed once per tap rather than once per channel and tap.

template <class T>
void im2col(const ConvGeometry& g, const T* x, T* col, int64_t ld) {
  const int64_t P = g.out_plane(), taps = g.kh * g.kw;
  // Stride-1 convolutions whose output is as wide as the input ("same" padding): a kernel tap's
  // row of col is the input plane shifted by a constant, so the valid rows are one contiguous
  // copy; only the few columns that fall into the padding are then zeroed.
  const bool shifted_plane = g.sw == 1 && g.sh == 1 && g.OW == g.W;
  if (!shifted_plane && g.sw == 1 && g.dw == 1) {
    im2col_unit_w(g, x, col, ld);
    return;
  }
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t ih0 = i * g.dh - g.ph;  // input row of output row 0
    const Range rows = valid_range(ih0, g.sh, g.H, g.OH);
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t off = j * g.dw - g.pw;
      const Range r = valid_range(off, g.sw, g.W, g.OW);
      const int64_t shift = ih0 * g.W + off;
      const int64_t e0 = rows.lo * g.W + r.lo, e1 = (rows.hi - 1) * g.W + r.hi;
      for (int64_t c = 0; c < g.Cg(); ++c) {
        const T* xc = x + c * g.in_plane();
        T* dst = col + (c * taps + i * g.kw + j) * ld;
        if (rows.lo > 0) std::fill(dst, dst + rows.lo * g.OW, T(0));
        if (rows.hi < g.OH) std::fill(dst + rows.hi * g.OW, dst + P, T(0));
        if (rows.lo >= rows.hi) continue;
        if (shifted_plane) {
          // dst[oh*W + ow] = x[(oh + ih0)*W + ow + off] for every valid (oh, ow).
          std::memcpy(dst + e0, xc + e0 + shift, sizeof(T) * (e1 - e0));
        } else {
          for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
            T* __restrict d = dst + oh * g.OW;
            const T* __restrict src = xc + (oh * g.sh + ih0) * g.W + off;
            if (g.sw == 2)  // a constant stride GCC vectorizes (two loads and a permute)
              for (int64_t ow = r.lo; ow < r.hi; ++ow) d[ow] = src[2 * ow];
            else
              for (int64_t ow = r.lo; ow < r.hi; ++ow) d[ow] = src[ow * g.sw];
          }
        }
        zero_fringe(g, rows, r, dst);
      }
    }
  }
}

template <class T>
void col2im(const ConvGeometry& g, T* col, T* x, int64_t ld) {
  const int64_t taps = g.kh * g.kw;
  const bool shifted_plane = g.sw == 1 && g.sh == 1 && g.OW == g.W;
  if (!shifted_plane && g.sw == 1 && g.dw == 1) {
    col2im_unit_w(g, col, x, ld);
    return;
  }
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t ih0 = i * g.dh - g.ph;
    const Range rows = valid_range(ih0, g.sh, g.H, g.OH);
    if (rows.lo >= rows.hi) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t off = j * g.dw - g.pw;
      const Range r = valid_range(off, g.sw, g.W, g.OW);
      const int64_t shift = ih0 * g.W + off;
      const int64_t e0 = rows.lo * g.W + r.lo, e1 = (rows.hi - 1) * g.W + r.hi;
      for (int64_t c = 0; c < g.Cg(); ++c) {
        T* xc = x + c * g.in_plane();
        T* srcp = col + (c * taps + i * g.kw + j) * ld;
        if (shifted_plane) {
          // The adjoint of im2col's contiguous copy: zero the padding columns of col (they would
          // land on the neighbouring row's edge), then add the whole block at once.
          zero_fringe(g, rows, r, srcp);
          T* __restrict d = xc + e0 + shift;
          const T* __restrict s = srcp + e0;
          for (int64_t e = 0; e < e1 - e0; ++e) d[e] += s[e];
          continue;
        }
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
          const T* s = srcp + oh * g.OW;
          T* d = xc + (oh * g.sh + ih0) * g.W;
          for (int64_t ow = r.lo; ow < r.hi; ++ow) d[ow * g.sw + off] += s[ow];
        }
      }
    }
  }
}

template <class T>
void depthwise_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* out) {
  const std::vector<Range> cols = column_ranges(g);
  const int64_t planes = g.N * g.C;
  const int64_t grain =
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.out_plane() * g.kh * g.kw));
  parallel_for(0, planes, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % g.C;
      const T* xp = x + p * g.in_plane();
      const T* wp = w + c * g.kh * g.kw;
      T* op = out + p * g.out_plane();
      std::fill(op, op + g.out_plane(), bias ? bias[c] : T(0));
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* orow = op + oh * g.OW;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const T* xrow = xp + ih * g.W;
          for (int64_t j = 0; j < g.kw; ++j) {
            const T wv = wp[i * g.kw + j];
            const int64_t off = j * g.dw - g.pw;
            const Range r = cols[j];
            if (g.sw == 1) {
              for (int64_t ow = r.lo; ow < r.hi; ++ow) orow[ow] += wv * xrow[ow + off];
            } else {
              for (int64_t ow = r.lo; ow < r.hi; ++ow) orow[ow] += wv * xrow[ow * g.sw + off];
            }
          }
        }
      }
    }
  });
}

template <class T>
void depthwise_backward_input(const ConvGeometry& g, const T* grad_out, const T* w, T* grad_in) {
  const std::vector<Range> cols = column_ranges(g);
  const int64_t planes = g.N * g.C;
  const int64_t grain =
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.out_plane() * g.kh * g.kw));
  parallel_for(0, planes, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % g.C;
      const T* gp = grad_out + p * g.out_plane();
      const T* wp = w + c * g.kh * g.kw;
      T* ip = grad_in + p * g.in_plane();
      std::fill(ip, ip + g.in_plane(), T(0));
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const T* grow = gp + oh * g.OW;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          T* irow = ip + ih * g.W;
          for (int64_t j = 0; j < g.kw; ++j) {
            const T wv = wp[i * g.kw + j];
            const int64_t off = j * g.dw - g.pw;
            const Range r = cols[j];
            if (g.sw == 1) {
              for (int64_t ow = r.lo; ow < r.hi; ++ow) irow[ow + off] += wv * grow[ow];
            } else {
              for (int64_t ow = r.lo; ow < r.hi; ++ow) irow[ow * g.sw + off] += wv * grow[ow];
            }
          }
        }
      }
    }
  });
}

template <class T>
void depthwise_backward_weight(const ConvGeometry& g, const T* grad_out, const T* x, T* grad_w) {
  const std::vector<Range> cols = column_ranges(g);
  const int64_t taps = g.kh * g.kw;
  parallel_for(0, g.C, 1, [&](int64_t c0, int64_t c1) {
    // One row of partial sums per kernel tap, added elementwise (vectorizable) and reduced once
    // at the end; the batch is visited in order, so the result is deterministic.
    std::vector<T> acc(static_cast<size_t>(taps * g.OW));
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t n = 0; n < g.N; ++n) {
        const T* gp = grad_out + (n * g.C + c) * g.out_plane();
        const T* xp = x + (n * g.C + c) * g.in_plane();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const T* grow = gp + oh * g.OW;
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t ih = oh * g.sh - g.ph + i * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            const T* xrow = xp + ih * g.W;
            for (int64_t j = 0; j < g.kw; ++j) {
              T* a = acc.data() + (i * g.kw + j) * g.OW;
              const int64_t off = j * g.dw - g.pw;
              const Range r = cols[j];
              if (g.sw == 1) {
                for (int64_t ow = r.lo; ow < r.hi; ++ow) a[ow] += grow[ow] * xrow[ow + off];
              } else {
                for (int64_t ow = r.lo; ow < r.hi; ++ow) a[ow] += grow[ow] * xrow[ow * g.sw + off];
              }
            }
          }
        }
      }
      for (int64_t t = 0; t < taps; ++t)
        grad_w[c * taps + t] = sum_contiguous(acc.data() + t * g.OW, g.OW);
    }
  });
}

template <class T>
T sum_contiguous(const T* p, int64_t n) {
  constexpr int64_t L = 16;
  T acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int64_t j = 0; j < L; ++j) acc[j] += p[i + j];
  for (int64_t j = 0; i < n; ++i, ++j) acc[j] += p[i];
  for (int64_t w = L / 2; w >= 1; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

#define STOKE_CONV_KERNELS(T)                                                                \
  template void im2col<T>(const ConvGeometry&, const T*, T*, int64_t);                       \
  template void col2im<T>(const ConvGeometry&, T*, T*, int64_t);                             \
  template void depthwise_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*); \
  template void depthwise_backward_input<T>(const ConvGeometry&, const T*, const T*, T*);    \
  template void depthwise_backward_weight<T>(const ConvGeometry&, const T*, const T*, T*);   \
  template T sum_contiguous<T>(const T*, int64_t);
STOKE_CONV_KERNELS(float)
STOKE_CONV_KERNELS(double)
#undef STOKE_CONV_KERNELS

}  // namespace stoke::ops::cpu
