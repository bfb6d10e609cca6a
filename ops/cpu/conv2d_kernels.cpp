#include "ops/cpu/conv2d_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"

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

}  // namespace

// Both loop over kernel taps (i, j) outside and channels inside, so the valid ranges (integer
// divisions) are computed once per tap rather than once per channel and tap.

template <class T>
void im2col(const ConvGeometry& g, const T* x, T* col) {
  const int64_t P = g.out_plane(), taps = g.kh * g.kw;
  // Stride-1 convolutions whose output is as wide as the input ("same" padding): a kernel tap's
  // row of col is the input plane shifted by a constant, so the valid rows are one contiguous
  // copy; only the few columns that fall into the padding are then zeroed.
  const bool shifted_plane = g.sw == 1 && g.sh == 1 && g.OW == g.W;
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
        T* dst = col + (c * taps + i * g.kw + j) * P;
        if (rows.lo > 0) std::fill(dst, dst + rows.lo * g.OW, T(0));
        if (rows.hi < g.OH) std::fill(dst + rows.hi * g.OW, dst + P, T(0));
        if (rows.lo >= rows.hi) continue;
        if (shifted_plane) {
          // dst[oh*W + ow] = x[(oh + ih0)*W + ow + off] for every valid (oh, ow).
          for (int64_t e = e0; e < e1; ++e) dst[e] = xc[e + shift];
        } else {
          for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
            T* d = dst + oh * g.OW;
            const T* src = xc + (oh * g.sh + ih0) * g.W;
            if (g.sw == 1) {
              for (int64_t ow = r.lo; ow < r.hi; ++ow) d[ow] = src[ow + off];
            } else {
              for (int64_t ow = r.lo; ow < r.hi; ++ow) d[ow] = src[ow * g.sw + off];
            }
          }
        }
        zero_fringe(g, rows, r, dst);
      }
    }
  }
}

template <class T>
void col2im(const ConvGeometry& g, T* col, T* x) {
  const int64_t P = g.out_plane(), taps = g.kh * g.kw;
  const bool shifted_plane = g.sw == 1 && g.sh == 1 && g.OW == g.W;
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
        T* srcp = col + (c * taps + i * g.kw + j) * P;
        if (shifted_plane) {
          // The adjoint of im2col's contiguous copy: zero the padding columns of col (they would
          // land on the neighbouring row's edge), then add the whole block at once.
          zero_fringe(g, rows, r, srcp);
          for (int64_t e = e0; e < e1; ++e) xc[e + shift] += srcp[e];
          continue;
        }
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
          const T* s = srcp + oh * g.OW;
          T* d = xc + (oh * g.sh + ih0) * g.W;
          if (g.sw == 1) {
            for (int64_t ow = r.lo; ow < r.hi; ++ow) d[ow + off] += s[ow];
          } else {
            for (int64_t ow = r.lo; ow < r.hi; ++ow) d[ow * g.sw + off] += s[ow];
          }
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
  template void im2col<T>(const ConvGeometry&, const T*, T*);                                \
  template void col2im<T>(const ConvGeometry&, T*, T*);                                      \
  template void depthwise_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*); \
  template void depthwise_backward_input<T>(const ConvGeometry&, const T*, const T*, T*);    \
  template void depthwise_backward_weight<T>(const ConvGeometry&, const T*, const T*, T*);   \
  template T sum_contiguous<T>(const T*, int64_t);
STOKE_CONV_KERNELS(float)
STOKE_CONV_KERNELS(double)
#undef STOKE_CONV_KERNELS

}  // namespace stoke::ops::cpu
