// CPU group / layer norm on the (N, G, K, S) view (ops/group_norm.h). Rows (n, g) of M = K * S
// contiguous values are independent: the forward and the input gradient run parallel over rows,
// the weight / bias gradients parallel over channels c = (g, k). Sums run in SIMD-width lanes of
// the input type over blocks of kGnFold values, folded into double after each block (vectorized,
// and double-ish accurate for f32). The variance is two-pass: the second pass sums (x - m) and
// (x - m)^2 around the rounded mean m, so a large offset does not cancel as in E[x^2] - E[x]^2.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/group_norm.h"

namespace stoke::ops::cpu {
namespace {

template <class T>
constexpr int64_t kGnLanes = 64 / sizeof(T);
constexpr int64_t kGnFold = 1024;

// s1 += sum f1(i), s2 += sum f2(i) over i in [0, n), where f(i, u, v) sets u and v; lanes of T
// folded into double every kGnFold values.
template <class T, class F>
inline void lane_sums2(int64_t n, F&& f, double& s1, double& s2) {
  constexpr int64_t L = kGnLanes<T>;
  for (int64_t i0 = 0; i0 < n; i0 += kGnFold) {
    const int64_t i1 = std::min(n, i0 + kGnFold);
    T a1[L] = {}, a2[L] = {};
    int64_t i = i0;
    for (; i + L <= i1; i += L)
      for (int64_t j = 0; j < L; ++j) {
        T u, v;
        f(i + j, u, v);
        a1[j] += u;
        a2[j] += v;
      }
    for (int64_t j = 0; i < i1; ++i, ++j) {
      T u, v;
      f(i, u, v);
      a1[j] += u;
      a2[j] += v;
    }
    double d1 = 0, d2 = 0;
    for (int64_t j = 0; j < L; ++j) {
      d1 += a1[j];
      d2 += a2[j];
    }
    s1 += d1;
    s2 += d2;
  }
}

// Chunks of rows (or channels) of ~32k values each.
int64_t grain_for(int64_t per_item) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, per_item));
}

void check_param(const char* op, const Tensor& t, const char* name, const Tensor& x, int64_t n) {
  if (!t.defined()) return;
  check_same_dtype(op, x, "input", t, name);
  check_shape(op, t, name, {n});
}

}  // namespace

GroupNormForward CpuBackend::group_norm_forward(const Tensor& input, const Tensor& weight,
                                                const Tensor& bias, const GroupNormLayout& l,
                                                double eps) {
  const char* op = "group_norm";
  check_float(op, input, "input");
  const int64_t C = l.groups * l.channels_per_group, M = l.channels_per_group * l.spatial;
  const int64_t rows = l.batch * l.groups;
  check_param(op, weight, "weight", input, C);
  check_param(op, bias, "bias", input, C);
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
            [&](int64_t i, T& u, T& v) {
              u = xr[i];
              v = T(0);
            },
            s, unused);
        const T m = T(M > 0 ? s / double(M) : 0.0);
        double d1 = 0, d2 = 0;
        lane_sums2<T>(
            M,
            [&](int64_t i, T& u, T& v) {
              u = xr[i] - m;
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
          else
            for (int64_t k = 0; k < M; ++k) yr[k] = (xr[k] - m) * rst - off + (bg ? bg[k] : T(0));
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
  check_param(op, weight, "weight", input, C);
  check_param(op, save_mean, "save_mean", input, rows);
  check_param(op, save_rstd, "save_rstd", input, rows);
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
    if (g.grad_input.defined()) {
      T* dxp = g.grad_input.data<T>();
      // dx = rstd * (dy * w - mean(dy * w) - xhat * mean(dy * w * xhat)), xhat = (x - m) * rstd:
      // per row dx = rstd * w * dy + k2 * (x - m) + k3.
      parallel_for(0, rows, grain_for(M), [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          const T* xr = xp + row * M;
          const T* dr = dyp + row * M;
          T* out = dxp + row * M;
          const T m = mp[row];
          const double rs = double(rp[row]);
          const T* wg = wp ? wp + (row % G) * K : nullptr;
          double sb = 0, sa = 0;  // sum(dy * w), sum(dy * w * (x - m))
          if (S == 1 && wg)
            lane_sums2<T>(
                M,
                [&](int64_t i, T& u, T& v) {
                  u = dr[i] * wg[i];
                  v = u * (xr[i] - m);
                },
                sb, sa);
          else
            for (int64_t k = 0; k < K; ++k) {
              double b1 = 0, a1 = 0;
              const T* xs = xr + k * S;
              const T* ds = dr + k * S;
              lane_sums2<T>(
                  S,
                  [&](int64_t i, T& u, T& v) {
                    u = ds[i];
                    v = u * (xs[i] - m);
                  },
                  b1, a1);
              const double wk = wg ? double(wg[k]) : 1.0;
              sb += wk * b1;
              sa += wk * a1;
            }
          const T k2 = T(-rs * rs * rs * sa / double(M)), k3 = T(-rs * sb / double(M));
          if (S == 1 && wg) {
            const T rst = T(rs);
            for (int64_t i = 0; i < M; ++i) out[i] = rst * wg[i] * dr[i] + k2 * (xr[i] - m) + k3;
          } else {
            for (int64_t k = 0; k < K; ++k) {
              const T a = T(rs * (wg ? double(wg[k]) : 1.0));
              const T* xs = xr + k * S;
              const T* ds = dr + k * S;
              T* os = out + k * S;
              for (int64_t i = 0; i < S; ++i) os[i] = a * ds[i] + k2 * (xs[i] - m) + k3;
            }
          }
        }
      });
    }
    if (!g.grad_weight.defined() && !g.grad_bias.defined()) return;
    T* gw = g.grad_weight.defined() ? g.grad_weight.data<T>() : nullptr;
    T* gb = g.grad_bias.defined() ? g.grad_bias.data<T>() : nullptr;
    // grad_weight[c] = sum over (n, s) of dy * (x - m) * rstd, grad_bias[c] = sum of dy.
    if (S == 1) {
      // Per-channel accumulators over a chunk of channels, the rows walked in order: the inner
      // loop runs along a contiguous row (vectorized), not down a column.
      parallel_for(0, C, std::max<int64_t>(16, grain_for(l.batch)), [&](int64_t c0, int64_t c1) {
        std::vector<double> aw(c1 - c0, 0.0), ab(c1 - c0, 0.0);
        for (int64_t n = 0; n < l.batch; ++n) {
          const T* xr = xp + n * C;
          const T* dr = dyp + n * C;
          if (G == 1) {
            const double m = double(mp[n]), rs = double(rp[n]);
            for (int64_t c = c0; c < c1; ++c) {
              aw[c - c0] += double(dr[c]) * (double(xr[c]) - m) * rs;
              ab[c - c0] += double(dr[c]);
            }
          } else {
            for (int64_t c = c0; c < c1; ++c) {
              const int64_t row = n * G + c / K;
              aw[c - c0] += double(dr[c]) * (double(xr[c]) - double(mp[row])) * double(rp[row]);
              ab[c - c0] += double(dr[c]);
            }
          }
        }
        for (int64_t c = c0; c < c1; ++c) {
          if (gw) gw[c] = T(aw[c - c0]);
          if (gb) gb[c] = T(ab[c - c0]);
        }
      });
      return;
    }
    parallel_for(0, C, grain_for(l.batch * S), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double aw = 0, ab = 0;
        for (int64_t n = 0; n < l.batch; ++n) {
          const int64_t row = n * G + c / K;
          const T m = mp[row];
          const T* xs = xp + (n * C + c) * S;
          const T* ds = dyp + (n * C + c) * S;
          double b1 = 0, a1 = 0;
          lane_sums2<T>(
              S,
              [&](int64_t i, T& u, T& v) {
                u = ds[i];
                v = u * (xs[i] - m);
              },
              b1, a1);
          aw += a1 * double(rp[row]);
          ab += b1;
        }
        if (gw) gw[c] = T(aw);
        if (gb) gb[c] = T(ab);
      }
    });
  });
  return g;
}

}  // namespace stoke::ops::cpu
