// CPU pooling kernels. Every kernel works on contiguous (H, W) planes and is parallel over the
// N*C planes; each plane is written by exactly one thread, so backward scatters need no atomics.
// The entry points (ops/pool.cpp) have checked the shapes and the window; the CPU dtypes are
// checked here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/pool_detail.h"

namespace stoke::ops::cpu {
namespace {

// Planes per parallel chunk so that a chunk holds at least ~16k elements of work.
int64_t plane_grain(int64_t plane_elems) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane_elems));
}

// The 2x2 stride-2 unpadded window that tiles the input exactly: the hot case in CNNs.
bool is_k2s2(const PoolGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 &&
         g.OH == g.H / 2 && g.OW == g.W / 2;
}

// v replaces the running max m when larger or NaN (PyTorch's rule: NaN propagates, the first of
// equal maxima wins). Written as nested selects, not `||`: that form lets the 2x2 loops below
// vectorize (in scalar code it still compiles to branches: see the generic path's fast rule).
template <class T>
inline bool takes_max(T v, T m) {
  return v != v ? true : v > m;
}
template <class T>
inline T max_step(T m, T v) {
  return v != v ? v : (v > m ? v : m);
}

// The 2x2 stride-2 max pool works on blocks of kPoolBlock outputs with a compile-time trip count,
// so that the compiler turns each block into a few vector instructions even for short rows (a
// 28-wide input gives 14 outputs: a runtime-length loop would run mostly in its scalar remainder).
// The row's tail runs as one more block that overlaps the previous one (see max_pool_row_k2s2).
constexpr int64_t kPoolBlock = 8;

// Output ow from rows r0 and r1 (r1 = r0 + W in the plane); k0 is r0's index in the plane. Always
// inlined: it is the body of the vectorized block loop below.
template <class T, bool kIndices>
[[gnu::always_inline]] inline void max_pool_one_k2s2(const T* __restrict r0, const T* __restrict r1,
                                                     int64_t W, int64_t k0, int64_t ow,
                                                     T* __restrict out, int64_t* __restrict ind) {
  const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
  T m = a;
  if constexpr (kIndices) {
    const int64_t kk = k0 + 2 * ow;
    int64_t k = kk;
    k = takes_max(b, m) ? kk + 1 : k;
    m = max_step(m, b);
    k = takes_max(c, m) ? kk + W : k;
    m = max_step(m, c);
    k = takes_max(d, m) ? kk + W + 1 : k;
    m = max_step(m, d);
    ind[ow] = k;
  } else {
    m = max_step(max_step(max_step(m, b), c), d);
  }
  out[ow] = m;
}

// kPoolBlock outputs from rows r0 and r1, as max_pool_one_k2s2.
template <class T, bool kIndices>
inline void max_pool_block_k2s2(const T* __restrict r0, const T* __restrict r1, int64_t W,
                                int64_t k0, T* __restrict out, int64_t* __restrict ind) {
  for (int64_t ow = 0; ow < kPoolBlock; ++ow)
    max_pool_one_k2s2<T, kIndices>(r0, r1, W, k0, ow, out, ind);
}

// One output row of the 2x2 stride-2 max pool; `base` is the plane index of r0's first element.
// Kept out of line: inlined into the plane loop, the blocks were no longer vectorized. A row of at
// least kPoolBlock outputs ends with one block that overlaps the previous one (recomputing a few
// outputs is cheaper than a scalar or scratch-buffer tail); shorter rows (LeNet's 5-wide second
// pool) run the same rule one output at a time.
template <class T, bool kIndices>
[[gnu::noinline]] void max_pool_row_k2s2(const T* r0, int64_t W, int64_t OW, int64_t base, T* out,
                                         int64_t* ind) {
  const T* r1 = r0 + W;
  if (OW < kPoolBlock) {
    for (int64_t ow = 0; ow < OW; ++ow)
      max_pool_one_k2s2<T, kIndices>(r0, r1, W, base, ow, out, ind);
    return;
  }
  int64_t ow = 0;
  for (; ow + kPoolBlock <= OW; ow += kPoolBlock)
    max_pool_block_k2s2<T, kIndices>(r0 + 2 * ow, r1 + 2 * ow, W, base + 2 * ow, out + ow,
                                     kIndices ? ind + ow : nullptr);
  if (ow == OW) return;
  ow = OW - kPoolBlock;
  max_pool_block_k2s2<T, kIndices>(r0 + 2 * ow, r1 + 2 * ow, W, base + 2 * ow, out + ow,
                                   kIndices ? ind + ow : nullptr);
}

template <class T, bool kIndices>
void max_pool_plane(const PoolGeometry& g, const T* in, T* out, int64_t* ind) {
  const int64_t W = g.W;
  if (is_k2s2(g)) {
    for (int64_t oh = 0; oh < g.OH; ++oh)
      max_pool_row_k2s2<T, kIndices>(in + 2 * oh * W, W, g.OW, 2 * oh * W, out + oh * g.OW,
                                     kIndices ? ind + oh * g.OW : nullptr);
    return;
  }
  // Columns whose windows lie fully inside the row: [ow_lo, ow_hi). They run kPoolBlock at a time
  // with independent running maxima (the scalar loop is one long dependency chain); the edge
  // columns, clipped by the padding, run one by one.
  const int64_t ow_lo = std::min(g.OW, (g.pw + g.sw - 1) / g.sw);
  const int64_t ow_hi =
      W + g.pw >= g.kw ? std::clamp((W + g.pw - g.kw) / g.sw + 1, ow_lo, g.OW) : ow_lo;
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const int64_t h0 = oh * g.sh - g.ph;
    const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + g.kh, g.H);
    T* orow = out + oh * g.OW;
    int64_t* irow = kIndices ? ind + oh * g.OW : nullptr;
    // The exact scan-order rule (NaN aware); its selects compile to branches in scalar code.
    auto exact = [&](int64_t ow) {
      const int64_t w0 = ow * g.sw - g.pw;
      const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kw, W);
      T m = -std::numeric_limits<T>::infinity();
      int64_t idx = hs * W + ws;
      for (int64_t h = hs; h < he; ++h)
        for (int64_t w = ws; w < we; ++w) {
          const T v = in[h * W + w];
          idx = takes_max(v, m) ? h * W + w : idx;
          m = max_step(m, v);
        }
      orow[ow] = m;
      if constexpr (kIndices) irow[ow] = idx;
    };
    // The fast rule ignores NaN (a plain `v > m` compiles to max + cmov) and accumulates v * 0,
    // which is NaN when some v was NaN or infinite; such windows are redone exactly.
    auto one = [&](int64_t ow) {
      const int64_t w0 = ow * g.sw - g.pw;
      const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kw, W);
      T m = -std::numeric_limits<T>::infinity(), z = 0;
      int64_t idx = hs * W + ws;
      for (int64_t h = hs; h < he; ++h)
        for (int64_t w = ws; w < we; ++w) {
          const T v = in[h * W + w];
          idx = v > m ? h * W + w : idx;
          m = v > m ? v : m;
          z += v * T(0);
        }
      orow[ow] = m;
      if constexpr (kIndices) irow[ow] = idx;
      if (z != z) exact(ow);
    };
    int64_t ow = 0;
    for (; ow < ow_lo; ++ow) one(ow);
    for (; ow + kPoolBlock <= ow_hi; ow += kPoolBlock) {
      T m[kPoolBlock], z[kPoolBlock];
      int64_t k[kPoolBlock];
      const int64_t w0 = ow * g.sw - g.pw;
      for (int64_t t = 0; t < kPoolBlock; ++t) {
        m[t] = -std::numeric_limits<T>::infinity();
        z[t] = 0;
        k[t] = hs * W + w0 + t * g.sw;
      }
      for (int64_t h = hs; h < he; ++h)
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t base = h * W + w0 + j;
          const T* src = in + base;
          for (int64_t t = 0; t < kPoolBlock; ++t) {
            const T v = src[t * g.sw];
            if constexpr (kIndices) k[t] = v > m[t] ? base + t * g.sw : k[t];
            m[t] = v > m[t] ? v : m[t];
            z[t] += v * T(0);
          }
        }
      for (int64_t t = 0; t < kPoolBlock; ++t) {
        orow[ow + t] = m[t];
        if constexpr (kIndices) irow[ow + t] = k[t];
        if (z[t] != z[t]) exact(ow + t);
      }
    }
    for (; ow < g.OW; ++ow) one(ow);
  }
}

template <bool kIndices>
MaxPool2dResult max_pool_impl(const char* op, const Tensor& input, const Pool2dOptions& options) {
  check_float(op, input, "input");
  const PoolGeometry g = pool_geometry(op, input.shape(), options);
  const Tensor x = input.contiguous();
  MaxPool2dResult r;
  r.output = empty(g.out_shape, {.dtype = x.dtype()});
  if (kIndices) r.indices = empty(g.out_shape, {.dtype = DType::i64});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = r.output.data<T>();
    int64_t* ind = kIndices ? r.indices.data<int64_t>() : nullptr;
    const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
    parallel_for(0, g.planes, plane_grain(in_plane), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p)
        max_pool_plane<T, kIndices>(g, in + p * in_plane, out + p * out_plane,
                                    kIndices ? ind + p * out_plane : nullptr);
    });
  });
  return r;
}

// Divisor of an avg_pool2d window, PyTorch's rule: the window clipped to the padded input when
// padding counts, else clipped to the input itself.
struct AvgWindow {
  int64_t hs, he, ws, we;
  int64_t divisor;
};

inline AvgWindow avg_window(const PoolGeometry& g, int64_t oh, int64_t ow, bool count_include_pad) {
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int64_t he = std::min(hs + g.kh, g.H + g.ph), we = std::min(ws + g.kw, g.W + g.pw);
  const int64_t padded = (he - hs) * (we - ws);
  hs = std::max<int64_t>(hs, 0);
  ws = std::max<int64_t>(ws, 0);
  he = std::min(he, g.H);
  we = std::min(we, g.W);
  const int64_t divisor = count_include_pad ? padded : (he - hs) * (we - ws);
  return {hs, he, ws, we, std::max<int64_t>(divisor, 1)};
}

// Adaptive window bounds along one dim: [floor(i*in/out), ceil((i+1)*in/out)).
void adaptive_bounds(int64_t in, int64_t out, std::vector<int64_t>& start,
                     std::vector<int64_t>& end) {
  start.resize(out);
  end.resize(out);
  for (int64_t i = 0; i < out; ++i) {
    start[i] = (i * in) / out;
    end[i] = ((i + 1) * in + out - 1) / out;
  }
}

}  // namespace

// Without the argmax bookkeeping, which makes the CPU kernel faster (CUDA computes the indices
// and drops them).
Tensor CpuBackend::max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  return max_pool_impl<false>("max_pool2d", input, options).output;
}

MaxPool2dResult CpuBackend::max_pool2d_with_indices(const Tensor& input,
                                                    const Pool2dOptions& options) {
  return max_pool_impl<true>("max_pool2d", input, options);
}

// Scatters by index alone: `options` (the forward's window) is not needed on the CPU.
Tensor CpuBackend::max_pool2d_backward(const Tensor& grad_output, const Tensor& indices,
                                       const Shape& input_shape, const Pool2dOptions&) {
  const char* op = "max_pool2d_backward";
  check_float(op, grad_output, "grad_output");
  const Tensor g = grad_output.contiguous();
  const Tensor ind = indices.contiguous();
  const int64_t nd = static_cast<int64_t>(input_shape.size());
  const int64_t in_plane = input_shape[nd - 2] * input_shape[nd - 1];
  const int64_t out_plane = g.size(-2) * g.size(-1);
  const int64_t planes = in_plane == 0 ? 0 : input_shape.numel() / in_plane;
  Tensor gi = empty(input_shape, {.dtype = g.dtype()});
  dispatch_float(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = g.data<T>();
    const int64_t* ip = ind.data<int64_t>();
    T* out = gi.data<T>();
    parallel_for(0, planes, plane_grain(in_plane), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        T* dst = out + p * in_plane;
        std::memset(dst, 0, sizeof(T) * in_plane);
        const T* src = gp + p * out_plane;
        const int64_t* idx = ip + p * out_plane;
        for (int64_t i = 0; i < out_plane; ++i) {
          const int64_t k = idx[i];
          STOKE_CHECK(k >= 0 && k < in_plane, op, "index ", k,
                      " out of range for an input plane of ", in_plane, " elements");
          dst[k] += src[i];
        }
      }
    });
  });
  return gi;
}

Tensor CpuBackend::avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  const char* op = "avg_pool2d";
  check_float(op, input, "input");
  const PoolGeometry g = pool_geometry(op, input.shape(), options);
  const Tensor x = input.contiguous();
  Tensor out = empty(g.out_shape, {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* op_ = out.data<T>();
    const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
    parallel_for(0, g.planes, plane_grain(in_plane), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* src = in + p * in_plane;
        T* dst = op_ + p * out_plane;
        if (is_k2s2(g)) {
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const T* r0 = src + 2 * oh * g.W;
            const T* r1 = r0 + g.W;
            for (int64_t ow = 0; ow < g.OW; ++ow)
              dst[oh * g.OW + ow] =
                  (r0[2 * ow] + r0[2 * ow + 1] + r1[2 * ow] + r1[2 * ow + 1]) * T(0.25);
          }
          continue;
        }
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const AvgWindow a = avg_window(g, oh, ow, options.count_include_pad);
            T sum = 0;
            for (int64_t h = a.hs; h < a.he; ++h)
              for (int64_t w = a.ws; w < a.we; ++w) sum += src[h * g.W + w];
            dst[oh * g.OW + ow] = sum / static_cast<T>(a.divisor);
          }
      }
    });
  });
  return out;
}

Tensor CpuBackend::avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape,
                                       const Pool2dOptions& options) {
  const char* op = "avg_pool2d_backward";
  check_float(op, grad_output, "grad_output");
  const PoolGeometry g = pool_geometry(op, input_shape, options);
  const Tensor gr = grad_output.contiguous();
  Tensor gi = empty(input_shape, {.dtype = gr.dtype()});
  dispatch_float(gr.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = gr.data<T>();
    T* out = gi.data<T>();
    const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
    parallel_for(0, g.planes, plane_grain(in_plane), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        T* dst = out + p * in_plane;
        const T* src = gp + p * out_plane;
        if (is_k2s2(g)) {
          if (g.W % 2 != 0 || g.H % 2 != 0) std::memset(dst, 0, sizeof(T) * in_plane);
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            T* r0 = dst + 2 * oh * g.W;
            T* r1 = r0 + g.W;
            for (int64_t ow = 0; ow < g.OW; ++ow) {
              const T v = src[oh * g.OW + ow] * T(0.25);
              r0[2 * ow] = v;
              r0[2 * ow + 1] = v;
              r1[2 * ow] = v;
              r1[2 * ow + 1] = v;
            }
          }
          continue;
        }
        std::memset(dst, 0, sizeof(T) * in_plane);
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const AvgWindow a = avg_window(g, oh, ow, options.count_include_pad);
            const T v = src[oh * g.OW + ow] / static_cast<T>(a.divisor);
            for (int64_t h = a.hs; h < a.he; ++h)
              for (int64_t w = a.ws; w < a.we; ++w) dst[h * g.W + w] += v;
          }
      }
    });
  });
  return gi;
}

Tensor CpuBackend::adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size) {
  const char* op = "adaptive_avg_pool2d";
  check_float(op, input, "input");
  const Tensor x = input.contiguous();
  const int64_t H = x.size(-2), W = x.size(-1), OH = output_size[0], OW = output_size[1];
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 2] = OH;
  out_shape[out_shape.size() - 1] = OW;
  std::vector<int64_t> hs, he, ws, we;
  adaptive_bounds(H, OH, hs, he);
  adaptive_bounds(W, OW, ws, we);
  const int64_t in_plane = H * W, out_plane = OH * OW, planes = x.numel() / in_plane;
  Tensor out = empty(out_shape, {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* o = out.data<T>();
    parallel_for(0, planes, plane_grain(in_plane), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const T* src = in + p * in_plane;
        T* dst = o + p * out_plane;
        for (int64_t i = 0; i < OH; ++i)
          for (int64_t j = 0; j < OW; ++j) {
            T sum = 0;
            for (int64_t h = hs[i]; h < he[i]; ++h)
              for (int64_t w = ws[j]; w < we[j]; ++w) sum += src[h * W + w];
            dst[i * OW + j] = sum / static_cast<T>((he[i] - hs[i]) * (we[j] - ws[j]));
          }
      }
    });
  });
  return out;
}

Tensor CpuBackend::adaptive_avg_pool2d_backward(const Tensor& grad_output,
                                                const Shape& input_shape) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_float(op, grad_output, "grad_output");
  const Tensor g = grad_output.contiguous();
  const int64_t nd = static_cast<int64_t>(input_shape.size());
  const int64_t H = input_shape[nd - 2], W = input_shape[nd - 1];
  const int64_t OH = g.size(-2), OW = g.size(-1);
  std::vector<int64_t> hs, he, ws, we;
  adaptive_bounds(H, OH, hs, he);
  adaptive_bounds(W, OW, ws, we);
  const int64_t in_plane = H * W, out_plane = OH * OW;
  const int64_t planes = in_plane == 0 ? 0 : input_shape.numel() / in_plane;
  Tensor gi = empty(input_shape, {.dtype = g.dtype()});
  dispatch_float(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = g.data<T>();
    T* out = gi.data<T>();
    parallel_for(0, planes, plane_grain(in_plane), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        T* dst = out + p * in_plane;
        const T* src = gp + p * out_plane;
        std::memset(dst, 0, sizeof(T) * in_plane);
        for (int64_t i = 0; i < OH; ++i)
          for (int64_t j = 0; j < OW; ++j) {
            const T v = src[i * OW + j] / static_cast<T>((he[i] - hs[i]) * (we[j] - ws[j]));
            for (int64_t h = hs[i]; h < he[i]; ++h)
              for (int64_t w = ws[j]; w < we[j]; ++w) dst[h * W + w] += v;
          }
      }
    });
  });
  return gi;
}

}  // namespace stoke::ops::cpu
