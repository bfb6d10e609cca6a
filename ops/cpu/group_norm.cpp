// CPU group / layer norm on the (N, G, K, S) view (ops/group_norm.h). Rows (n, g) of M = K * S
// contiguous values are independent: the forward and the input gradient run parallel over rows,
// the weight / bias gradients parallel over channels c = (g, k). Sums run in SIMD-width lanes of
// the input type over blocks of kGnFold values, folded into double after each block (vectorized,
// and double-ish accurate for f32). The variance is two-pass: the second pass sums (x - m) and
// (x - m)^2 around the rounded mean m, so a large offset does not cancel as in E[x^2] - E[x]^2.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/parallel.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/group_norm.h"

namespace stoke::ops::cpu {
namespace {

// The widest vector registers -march gives (a vector of T passed to or returned from a function
// wider than that would change the ABI, which GCC warns about).
#if defined(__AVX512F__)
constexpr int64_t kGnVecBytes = 64;
#elif defined(__AVX__)
constexpr int64_t kGnVecBytes = 32;
#else
constexpr int64_t kGnVecBytes = 16;
#endif
template <class T>
constexpr int64_t kGnLanes = kGnVecBytes / sizeof(T);
constexpr int64_t kGnFold = 1024;

// A vector of kGnLanes values of T (GCC/clang vector extension).
template <class T>
struct GnLanes {
  typedef T vec __attribute__((vector_size(kGnVecBytes)));
};

// Loads V (a GnLanes vector or T itself) from p.
template <class V, class T>
inline V load_lanes(const T* p) {
  if constexpr (std::is_same_v<V, T>) {
    return *p;
  } else {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
}

// s1 += sum u, s2 += sum v over i in [0, n), where f(i, u, v) sets u and v for the values at i..:
// called with vectors of kGnLanes values (u, v of GnLanes<T>::vec) and with single values (T) for
// the tail, so it loads with load_lanes<decltype(u)>. The lanes are summed in T over blocks of
// kGnFold values and folded into double after each block. The accumulators are vector values,
// which stay in registers (arrays of lanes did not: GCC kept them on the stack, reloading them
// every step).
template <class T, class F>
inline void lane_sums2(int64_t n, F&& f, double& s1, double& s2) {
  using V = typename GnLanes<T>::vec;
  constexpr int64_t L = kGnLanes<T>;
  for (int64_t i0 = 0; i0 < n; i0 += kGnFold) {
    const int64_t i1 = std::min(n, i0 + kGnFold);
    V a1 = {}, a2 = {};
    int64_t i = i0;
    for (; i + L <= i1; i += L) {
      V u, v;
      f(i, u, v);
      a1 += u;
      a2 += v;
    }
    T t1 = 0, t2 = 0;
    for (; i < i1; ++i) {
      T u, v;
      f(i, u, v);
      t1 += u;
      t2 += v;
    }
    for (int64_t j = 0; j < L; ++j) {
      t1 += a1[j];
      t2 += a2[j];
    }
    s1 += double(t1);
    s2 += double(t2);
  }
}

// The input gradient of one row of M values with one channel per value (spatial size 1, as
// layer_norm's rows): dx = rstd * w * dy + k2 * (x - m) + k3 (group_norm_backward's formula),
// w = 1 when wg is null.
template <class T>
void grad_input_row_s1(int64_t M, const T* xr, const T* dr, const T* wg, T m, double rs, T* out) {
  double sb = 0, sa = 0;  // sum(dy * w), sum(dy * w * (x - m))
  lane_sums2<T>(
      M,
      [&](int64_t i, auto& u, auto& v) {
        using V = std::decay_t<decltype(u)>;
        u = wg ? load_lanes<V>(dr + i) * load_lanes<V>(wg + i) : load_lanes<V>(dr + i);
        v = u * (load_lanes<V>(xr + i) - m);
      },
      sb, sa);
  const T k2 = T(-rs * rs * rs * sa / double(M)), k3 = T(-rs * sb / double(M)), rst = T(rs);
  if (wg)
    for (int64_t i = 0; i < M; ++i) out[i] = rst * wg[i] * dr[i] + k2 * (xr[i] - m) + k3;
  else
    for (int64_t i = 0; i < M; ++i) out[i] = rst * dr[i] + k2 * (xr[i] - m) + k3;
}

// Chunks of rows (or channels) of ~32k values each.
int64_t grain_for(int64_t per_item) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, per_item));
}

// The CPU's dtype rule for a per-channel tensor (the input's dtype); shapes are checked by the
// entry points (ops/group_norm.cpp), which also check the forward's dtypes, naming the user's op.
void check_param(const char* op, const Tensor& t, const char* name, const Tensor& x) {
  if (t.defined()) check_same_dtype(op, x, "input", t, name);
}

}  // namespace

GroupNormForward CpuBackend::group_norm_forward(const Tensor& input, const Tensor& weight,
                                                const Tensor& bias, const GroupNormLayout& l,
                                                double eps) {
  const char* op = "group_norm";
  const int64_t M = l.channels_per_group * l.spatial, rows = l.batch * l.groups;
  const Tensor x = input.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : weight;
  const Tensor b = bias.defined() ? bias.contiguous() : bias;
  GroupNormForward r{empty(x.shape(), {.dtype = x.dtype()}), empty({rows}, {.dtype = x.dtype()}),
                     empty({rows}, {.dtype = x.dtype()})};
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* wp = w.defined() ? w.data<T>() : nullptr;
    const T* bp = b.defined() ? b.data<T>() : nullptr;
    T* yp = r.output.data<T>();
    T* mean_out = r.save_mean.data<T>();
    T* rstd_out = r.save_rstd.data<T>();
    parallel_for(0, rows, grain_for(M), [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        const T* xr = xp + row * M;
        T* yr = yp + row * M;
        double s = 0, unused = 0;
        lane_sums2<T>(
            M,
            [&](int64_t i, auto& u, auto& v) {
              u = load_lanes<std::decay_t<decltype(u)>>(xr + i);
              v = std::decay_t<decltype(v)>{};
            },
            s, unused);
        const T m = T(M > 0 ? s / double(M) : 0.0);
        double d1 = 0, d2 = 0;
        lane_sums2<T>(
            M,
            [&](int64_t i, auto& u, auto& v) {
              u = load_lanes<std::decay_t<decltype(u)>>(xr + i) - m;
              v = u * u;
            },
            d1, d2);
        const double dm = M > 0 ? d1 / double(M) : 0.0;
        const double var = M > 0 ? std::max(0.0, d2 / double(M) - dm * dm) : 0.0;
        const double rs = 1.0 / std::sqrt(var + eps);
        mean_out[row] = T(double(m) + dm);
        rstd_out[row] = T(rs);
        // y = (x - m) * rstd * w + (b - dm * rstd * w): centered on m, the small residual dm
        // folded into the shift.
        const int64_t g = row % l.groups;
        const T* wg = wp ? wp + g * l.channels_per_group : nullptr;
        const T* bg = bp ? bp + g * l.channels_per_group : nullptr;
        if (l.spatial == 1) {
          const T rst = T(rs), off = T(dm * rs);
          if (wg && bg)
            for (int64_t k = 0; k < M; ++k) yr[k] = ((xr[k] - m) * rst - off) * wg[k] + bg[k];
          else if (wg)
            for (int64_t k = 0; k < M; ++k) yr[k] = ((xr[k] - m) * rst - off) * wg[k];
          else if (bg)  // (the test outside the loop: inside, it became a masked load from null)
            for (int64_t k = 0; k < M; ++k) yr[k] = (xr[k] - m) * rst - off + bg[k];
          else
            for (int64_t k = 0; k < M; ++k) yr[k] = (xr[k] - m) * rst - off;
          continue;
        }
        for (int64_t k = 0; k < l.channels_per_group; ++k) {
          const double sc = rs * (wg ? double(wg[k]) : 1.0);
          const T scale = T(sc), shift = T((bg ? double(bg[k]) : 0.0) - dm * sc);
          const T* xs = xr + k * l.spatial;
          T* ys = yr + k * l.spatial;
          for (int64_t i = 0; i < l.spatial; ++i) ys[i] = (xs[i] - m) * scale + shift;
        }
      }
    });
  });
  return r;
}

GroupNormGrads CpuBackend::group_norm_backward(const Tensor& grad_output, const Tensor& input,
                                               const Tensor& weight, const Tensor& save_mean,
                                               const Tensor& save_rstd, const GroupNormLayout& l,
                                               std::array<bool, 3> output_mask) {
  const char* op = "group_norm_backward";
  check_float(op, input, "input");
  check_same_dtype(op, input, "input", grad_output, "grad_output");
  const int64_t K = l.channels_per_group, S = l.spatial, G = l.groups;
  const int64_t C = G * K, M = K * S, rows = l.batch * G;
  check_param(op, weight, "weight", input);
  check_param(op, save_mean, "save_mean", input);
  check_param(op, save_rstd, "save_rstd", input);
  const Tensor x = input.contiguous(), dy = grad_output.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : weight;
  const Tensor mean_t = save_mean.contiguous(), rstd_t = save_rstd.contiguous();
  GroupNormGrads g;
  if (output_mask[0]) g.grad_input = empty(x.shape(), {.dtype = x.dtype()});
  if (output_mask[1] && w.defined()) g.grad_weight = empty({C}, {.dtype = x.dtype()});
  if (output_mask[2]) g.grad_bias = empty({C}, {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    const T* wp = w.defined() ? w.data<T>() : nullptr;
    const T* mp = mean_t.data<T>();
    const T* rp = rstd_t.data<T>();
    T* gw = g.grad_weight.defined() ? g.grad_weight.data<T>() : nullptr;
    T* gb = g.grad_bias.defined() ? g.grad_bias.data<T>() : nullptr;
    if (S == 1) {
      // One pass over blocks of kRows rows (layer_norm's rows; group_norm of (N, C) input):
      // each row's input gradient, and each block's per-channel sums of dy * (x - m) * rstd and
      // of dy in T, which are then summed over the blocks in order in double. x and dy are read
      // once (a second pass for the weight gradient took longer than the input gradient), and
      // the blocks do not depend on the thread count, so neither do the sums.
      constexpr int64_t kRows = 64;
      const int64_t blocks = (rows + kRows - 1) / kRows;
      T* dxp = g.grad_input.defined() ? g.grad_input.data<T>() : nullptr;
      const bool sums = gw || gb;
      const Tensor partial = sums ? empty({blocks, 2 * C}, {.dtype = x.dtype()}) : Tensor();
      T* pp = sums ? partial.data<T>() : nullptr;
      parallel_for(0, blocks, grain_for(kRows * M), [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
          T* pw = sums ? pp + blk * 2 * C : nullptr;
          T* pb = sums ? pw + C : nullptr;
          if (sums) std::fill(pw, pw + 2 * C, T(0));
          for (int64_t row = blk * kRows; row < std::min(rows, (blk + 1) * kRows); ++row) {
            const T* xr = xp + row * M;
            const T* dr = dyp + row * M;
            const int64_t c0 = (row % G) * K;
            const T m = mp[row];
            if (dxp)
              grad_input_row_s1<T>(M, xr, dr, wp ? wp + c0 : nullptr, m, double(rp[row]),
                                   dxp + row * M);
            if (!sums) continue;
            const T rst = rp[row];
            T* w_acc = pw + c0;
            T* b_acc = pb + c0;
            for (int64_t k = 0; k < K; ++k) {
              w_acc[k] += dr[k] * (xr[k] - m) * rst;
              b_acc[k] += dr[k];
            }
          }
        }
      });
      if (!sums) return;
      parallel_for(0, C, std::max<int64_t>(16, grain_for(2 * blocks)), [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          double aw = 0, ab = 0;
          for (int64_t blk = 0; blk < blocks; ++blk) {
            aw += double(pp[blk * 2 * C + c]);
            ab += double(pp[blk * 2 * C + C + c]);
          }
          if (gw) gw[c] = T(aw);
          if (gb) gb[c] = T(ab);
        }
      });
      return;
    }
    // Spatial size S > 1: per row (n, g) and channel k, b1 = sum of dy and a1 = sum of
    // dy * (x - m) over the S positions give both the input gradient (dx = rstd * (dy * w -
    // mean(dy * w) - xhat * mean(dy * w * xhat)), xhat = (x - m) * rstd, per row
    // dx = rstd * w * dy + k2 * (x - m) + k3) and the channel's share of the weight gradient
    // (grad_weight[c] = sum over n of a1 * rstd, grad_bias[c] = sum of b1): one pass over x and
    // dy keeps them per (n, c), then each channel sums its column over n in order.
    T* dxp = g.grad_input.defined() ? g.grad_input.data<T>() : nullptr;
    const bool sums = gw || gb;
    const Tensor per_nc = sums ? empty({l.batch * C, 2}, {.dtype = DType::f64}) : Tensor();
    double* nc = sums ? per_nc.data<double>() : nullptr;
    parallel_for(0, rows, grain_for(M), [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        const T* xr = xp + row * M;
        const T* dr = dyp + row * M;
        const T m = mp[row];
        const double rs = double(rp[row]);
        const T* wg = wp ? wp + (row % G) * K : nullptr;
        double sb = 0, sa = 0;  // sum(dy * w), sum(dy * w * (x - m))
        for (int64_t k = 0; k < K; ++k) {
          double b1 = 0, a1 = 0;
          const T* xs = xr + k * S;
          const T* ds = dr + k * S;
          lane_sums2<T>(
              S,
              [&](int64_t i, auto& u, auto& v) {
                using V = std::decay_t<decltype(u)>;
                u = load_lanes<V>(ds + i);
                v = u * (load_lanes<V>(xs + i) - m);
              },
              b1, a1);
          const double wk = wg ? double(wg[k]) : 1.0;
          sb += wk * b1;
          sa += wk * a1;
          if (sums) {  // row * K + k = n * C + c
            nc[(row * K + k) * 2] = a1 * rs;
            nc[(row * K + k) * 2 + 1] = b1;
          }
        }
        if (!dxp) continue;
        const T k2 = T(-rs * rs * rs * sa / double(M)), k3 = T(-rs * sb / double(M));
        for (int64_t k = 0; k < K; ++k) {
          const T a = T(rs * (wg ? double(wg[k]) : 1.0));
          const T* xs = xr + k * S;
          const T* ds = dr + k * S;
          T* os = dxp + row * M + k * S;
          for (int64_t i = 0; i < S; ++i) os[i] = a * ds[i] + k2 * (xs[i] - m) + k3;
        }
      }
    });
    if (!sums) return;
    parallel_for(0, C, std::max<int64_t>(16, grain_for(2 * l.batch)), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double aw = 0, ab = 0;
        for (int64_t n = 0; n < l.batch; ++n) {
          aw += nc[(n * C + c) * 2];
          ab += nc[(n * C + c) * 2 + 1];
        }
        if (gw) gw[c] = T(aw);
        if (gb) gb[c] = T(ab);
      }
    });
  });
  return g;
}

}  // namespace stoke::ops::cpu
