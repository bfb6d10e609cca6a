// CPU softmax / log_softmax. The input is viewed as [outer, n, inner] with `n` the softmax dim.
// inner == 1 (the last dim, the common case): one row at a time, three short vectorizable passes
// (max, exp-and-sum, scale). Otherwise tiles of up to kSoftmaxTile positions along `inner` are
// processed together, so the inner loops run over contiguous memory as well.
#include <cmath>

#include "core/parallel.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/row_kernels.h"
#include "ops/softmax.h"

namespace stoke::ops::cpu {

double vexp(double x) {
  return std::exp(x);
}

namespace {

constexpr int64_t kSoftmaxGrain = 32768;
constexpr int64_t kSoftmaxTile = 256;

struct Geometry {
  int64_t outer = 1, n = 1, inner = 1;
};

Geometry geometry(const Tensor& x, int64_t dim, const char* op) {
  Geometry g;
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return g;
  g.n = x.size(d);
  for (int64_t i = 0; i < d; ++i) g.outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) g.inner *= x.size(i);
  return g;
}

// Runs row(o) for every row when inner == 1, else tile(o, k0, w) for tiles along inner.
template <class Row, class Tile>
void drive(const Geometry& g, Row&& row, Tile&& tile) {
  if (g.n == 0) return;
  if (g.inner == 1) {
    parallel_for(0, g.outer, std::max<int64_t>(1, kSoftmaxGrain / g.n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) row(o);
    });
    return;
  }
  const int64_t tiles = (g.inner + kSoftmaxTile - 1) / kSoftmaxTile;
  const int64_t per_task = g.n * std::min(g.inner, kSoftmaxTile);
  parallel_for(0, g.outer * tiles, std::max<int64_t>(1, kSoftmaxGrain / per_task),
               [&](int64_t b, int64_t e) {
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t o = t / tiles, k0 = (t % tiles) * kSoftmaxTile;
                   tile(o, k0, std::min(kSoftmaxTile, g.inner - k0));
                 }
               });
}

template <bool Log>
Tensor softmax_forward(const Tensor& x_in, int64_t dim, const char* op) {
  check_float(op, x_in, "input");
  const Geometry g = geometry(x_in, dim, op);
  const Tensor x = x_in.detach().contiguous();
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = out.data<T>();
    const int64_t n = g.n, inner = g.inner;
    auto row = [&](int64_t o) {
      const T* xr = px + o * n;
      T* yr = py + o * n;
      const T m = cpu::row_max(xr, n);
      if constexpr (Log) {
        const T lse =
            m + std::log(cpu::lane_sum<T>(n, [&](int64_t i) { return cpu::vexp(xr[i] - m); }));
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] - lse;
      } else {
        const T s = cpu::lane_sum<T>(n, [&](int64_t i) { return yr[i] = cpu::vexp(xr[i] - m); });
        const T inv = T(1) / s;
        for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
      }
    };
    auto tile = [&](int64_t o, int64_t k0, int64_t w) {
      T m[kSoftmaxTile], s[kSoftmaxTile];
      const T* xb = px + o * n * inner + k0;
      T* yb = py + o * n * inner + k0;
      for (int64_t k = 0; k < w; ++k) {
        m[k] = xb[k];
        s[k] = 0;
      }
      for (int64_t d = 1; d < n; ++d)
        for (int64_t k = 0; k < w; ++k) m[k] = xb[d * inner + k] > m[k] ? xb[d * inner + k] : m[k];
      for (int64_t d = 0; d < n; ++d)
        for (int64_t k = 0; k < w; ++k) {
          const T e = cpu::vexp(xb[d * inner + k] - m[k]);
          if constexpr (!Log) yb[d * inner + k] = e;
          s[k] += e;
        }
      if constexpr (Log) {
        for (int64_t k = 0; k < w; ++k) m[k] += std::log(s[k]);
        for (int64_t d = 0; d < n; ++d)
          for (int64_t k = 0; k < w; ++k) yb[d * inner + k] = xb[d * inner + k] - m[k];
      } else {
        for (int64_t k = 0; k < w; ++k) s[k] = T(1) / s[k];
        for (int64_t d = 0; d < n; ++d)
          for (int64_t k = 0; k < w; ++k) yb[d * inner + k] *= s[k];
      }
    };
    drive(g, row, tile);
  });
  return out;
}

template <bool Log>
Tensor softmax_grad(const Tensor& grad_in, const Tensor& out_in, int64_t dim, const char* op) {
  check_float(op, out_in, "output");  // dtypes and shapes: ops/softmax.cpp
  const Geometry g = geometry(out_in, dim, op);
  const Tensor gr = grad_in.detach().contiguous(), y = out_in.detach().contiguous();
  Tensor gx = empty(y.shape(), {.dtype = y.dtype()});
  dispatch_float(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pg = gr.data<T>(), *py = y.data<T>();
    T* px = gx.data<T>();
    const int64_t n = g.n, inner = g.inner;
    auto row = [&](int64_t o) {
      const T* gr_ = pg + o * n;
      const T* yr = py + o * n;
      T* xr = px + o * n;
      if constexpr (Log) {
        const T s = cpu::lane_sum<T>(n, [&](int64_t i) { return gr_[i]; });
        for (int64_t i = 0; i < n; ++i) xr[i] = gr_[i] - cpu::vexp(yr[i]) * s;
      } else {
        const T dot = cpu::lane_sum<T>(n, [&](int64_t i) { return gr_[i] * yr[i]; });
        for (int64_t i = 0; i < n; ++i) xr[i] = yr[i] * (gr_[i] - dot);
      }
    };
    auto tile = [&](int64_t o, int64_t k0, int64_t w) {
      T s[kSoftmaxTile];
      const int64_t base = o * n * inner + k0;
      const T *gb = pg + base, *yb = py + base;
      T* xb = px + base;
      for (int64_t k = 0; k < w; ++k) s[k] = 0;
      for (int64_t d = 0; d < n; ++d)
        for (int64_t k = 0; k < w; ++k) {
          if constexpr (Log)
            s[k] += gb[d * inner + k];
          else
            s[k] += gb[d * inner + k] * yb[d * inner + k];
        }
      for (int64_t d = 0; d < n; ++d)
        for (int64_t k = 0; k < w; ++k) {
          const int64_t i = d * inner + k;
          if constexpr (Log)
            xb[i] = gb[i] - cpu::vexp(yb[i]) * s[k];
          else
            xb[i] = yb[i] * (gb[i] - s[k]);
        }
    };
    drive(g, row, tile);
  });
  return gx;
}

}  // namespace

Tensor CpuBackend::softmax(const Tensor& x, int64_t dim, bool log) {
  return log ? softmax_forward<true>(x, dim, "log_softmax")
             : softmax_forward<false>(x, dim, "softmax");
}

Tensor CpuBackend::softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim,
                                    bool log) {
  return log ? softmax_grad<true>(grad, output, dim, "log_softmax_backward")
             : softmax_grad<false>(grad, output, dim, "softmax_backward");
}

}  // namespace stoke::ops::cpu
