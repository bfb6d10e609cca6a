// CPU batch norm. The contiguous input is viewed as (N, C, S), a channels_last one as (N, S, C) on
// its NHWC storage (the same sums in the same order per channel: channel_sums_cl, affine_cl, so the
// results equal NCHW's bit for bit, without a copy to NCHW and back); every pass is parallel over
// channel ranges, and a thread handles its channels for all n, so per-channel sums need no
// combining across threads. Sums run in SIMD-width lanes of the input type over short blocks and
// are folded into double after each block: vectorized, and accurate to double-ish precision for
// f32. The variance is computed around a per-channel shift (the channel's first element), which
// avoids the cancellation of E[x^2] - E[x]^2 when the mean is large against the spread.
// The entry points (ops/batch_norm.cpp) have checked that the tensors are defined and on one
// device; the CPU's dtype rule (per-channel tensors in the input's dtype) is checked here.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/batch_norm.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/memory_format.h"

namespace stoke::ops::cpu {
namespace {

// The channels-last loops run over a row's channels, reading several per-channel arrays beside the
// row and writing one: more streams than GCC's run-time alias checks allow, so it left them
// scalar. They never overlap (distinct allocations); ivdep says so. Vectorizing across channels
// changes no value: each channel's operations stay the same.
#if defined(__clang__)
#define STOKE_BN_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define STOKE_BN_IVDEP _Pragma("GCC ivdep")
#endif

// cl: the memory is (N, S, C) (a 4-d channels_last tensor's NHWC storage) instead of (N, C, S).
struct Layout {
  int64_t N = 0, C = 0, S = 0;
  bool cl = false;
};

Layout layout_of(const Tensor& x) {
  Layout l;
  l.N = x.size(0);
  l.C = x.size(1);
  l.S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) l.S *= x.size(d);
  l.cl = kernel_format(x) == MemoryFormat::channels_last;
  return l;
}

// The fused ReLU's two selects, shared by every pass of both layouts: kMask reads v as 0 where
// m <= 0 (ReLU's backward on dy; v is loaded whatever m says: a select between two loaded values
// vectorizes as a blend, where a load under the condition may not); kRelu stores relu(v), NaN kept
// as stoke::relu keeps it.
template <bool kMask, class T>
inline T masked(T v, T m) {
  if constexpr (kMask)
    return m > T(0) ? v : T(0);
  else
    return v;
}
template <bool kRelu, class T>
inline T relu_if(T v) {
  if constexpr (kRelu)
    return v < T(0) ? T(0) : v;
  else
    return v;
}
// Rows of fewer elements than this are handled channel-vectorized (loop over c innermost).
constexpr int64_t kRowMin = 16;

// Runs f(c0, c1) over channel ranges, splitting so each chunk has ~32k elements of work.
template <class F>
void for_channels(const Layout& l, F&& f) {
  const int64_t per_channel = std::max<int64_t>(1, l.N * l.S);
  const int64_t grain = std::max<int64_t>(1, 32768 / per_channel);
  parallel_for(0, l.C, grain, [&](int64_t c0, int64_t c1) { f(c0, c1); });
}

// Lanes per accumulator array (two vector registers) and elements per block before folding.
template <class T>
constexpr int64_t kBnLanes = 128 / sizeof(T);
constexpr int64_t kBnFold = 1024;

// Per-lane sums of (a[i] - ka) and (a[i] - ka) * (b[i] - kb) over n elements, added into the
// lane accumulators a1, a2 (the tail goes into the first lanes). With b == a this gives the
// shifted sum and sum of squares; with a = dy, ka = 0, b = x, kb = mean it gives sum(dy) and
// sum(dy * (x - mean)). With kMask, a[i] counts only where mask[i] > 0 (ReLU's backward on dy,
// mask = the ReLU's output), as a select the loop still vectorizes.
template <class T, bool kMask = false>
inline void lane_sums(const T* a, T ka, const T* b, T kb, const T* mask, int64_t n,
                      T* __restrict a1, T* __restrict a2) {
  constexpr int64_t L = kBnLanes<T>;
  // Local copies stay in registers through the loop; accumulating into a1/a2 directly kept them
  // on the stack (a store-to-load chain per block).
  T l1[L], l2[L];
  for (int64_t j = 0; j < L; ++j) {
    l1[j] = a1[j];
    l2[j] = a2[j];
  }
  const auto av = [&](int64_t i) { return masked<kMask>(a[i], kMask ? mask[i] : T(0)); };
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int64_t j = 0; j < L; ++j) {
      const T u = av(i + j) - ka;
      l1[j] += u;
      l2[j] += u * (b[i + j] - kb);
    }
  for (int64_t j = 0; i < n; ++i, ++j) {
    const T u = av(i) - ka;
    l1[j] += u;
    l2[j] += u * (b[i] - kb);
  }
  for (int64_t j = 0; j < L; ++j) {
    a1[j] = l1[j];
    a2[j] = l2[j];
  }
}

// channel_sums on channels-last memory ((N, S, C), Layout::cl): per channel the same additions in
// the same order as the (N, C, S) path below, so the sums are equal bit for bit. Each lane of a
// channel gets the values it gets there (position k of a row's kBnFold chunk goes to lane k % L in
// the chunk's whole-L part and to lane k - that part's length in its tail, as lane_sums assigns
// them), the lanes fold into double at the same points, and the short-row path sums in double in
// the same (n, s) order. The loops run over a row's channels innermost, contiguous here.
template <class T, bool kMask>
void channel_sums_cl(const Layout& l, const T* a, const T* ka, const T* b, const T* kb,
                     const T* mask, int64_t c0, int64_t c1, double* s1, double* s2) {
  const int64_t cb = c1 - c0;
  std::fill(s1, s1 + cb, 0.0);
  std::fill(s2, s2 + cb, 0.0);
  const auto av = [](const T* ar, const T* mr, int64_t c) {
    return masked<kMask>(ar[c], kMask ? mr[c] : T(0));
  };
  if (l.S >= kRowMin) {
    constexpr int64_t L = kBnLanes<T>;
    std::vector<T> acc1(static_cast<size_t>(L * cb), T(0)), acc2(acc1);
    int64_t pending = 0;
    const auto fold = [&] {
      for (int64_t c = 0; c < cb; ++c) {
        double d1 = 0, d2 = 0;
        for (int64_t j = 0; j < L; ++j) {
          d1 += acc1[static_cast<size_t>(j * cb + c)];
          d2 += acc2[static_cast<size_t>(j * cb + c)];
        }
        s1[c] += d1;
        s2[c] += d2;
      }
      std::fill(acc1.begin(), acc1.end(), T(0));
      std::fill(acc2.begin(), acc2.end(), T(0));
      pending = 0;
    };
    for (int64_t n = 0; n < l.N; ++n)
      for (int64_t i = 0; i < l.S; i += kBnFold) {
        const int64_t len = std::min(kBnFold, l.S - i), whole = len / L * L;
        for (int64_t k = 0; k < len; ++k) {
          const int64_t off = (n * l.S + i + k) * l.C + c0;
          const T* ar = a + off;
          const T* br = b + off;
          const T* mr = kMask ? mask + off : nullptr;
          const int64_t lane = k < whole ? k % L : k - whole;
          T* r1 = acc1.data() + lane * cb;
          T* r2 = acc2.data() + lane * cb;
          STOKE_BN_IVDEP
          for (int64_t c = 0; c < cb; ++c) {
            const T u = av(ar, mr, c) - ka[c0 + c];
            r1[c] += u;
            r2[c] += u * (br[c] - kb[c0 + c]);
          }
        }
        pending += len;
        if (pending >= kBnFold) fold();
      }
    fold();
    return;
  }
  for (int64_t n = 0; n < l.N; ++n)
    for (int64_t s = 0; s < l.S; ++s) {
      const int64_t off = (n * l.S + s) * l.C;
      const T* ar = a + off;
      const T* br = b + off;
      const T* mr = kMask ? mask + off : nullptr;
      for (int64_t c = c0; c < c1; ++c) {
        const double u = double(av(ar, mr, c)) - double(ka[c]);
        s1[c - c0] += u;
        s2[c - c0] += u * (double(br[c]) - double(kb[c]));
      }
    }
}

// Per channel in [c0, c1): s1[c - c0] += sum(a - ka[c]), s2 += sum((a - ka[c]) * (b - kb[c])),
// a masked by mask > 0 when kMask (see lane_sums).
// The lanes run on across the channel's rows and are folded into double once about kBnFold elements
// went in, not once per row: ResNet's 7x7 and 14x14 planes are 49 and 196 elements, where a fold
// (and a scalar tail in double) per row cost more than the row's vector work.
template <class T, bool kMask = false>
void channel_sums(const Layout& l, const T* a, const T* ka, const T* b, const T* kb, const T* mask,
                  int64_t c0, int64_t c1, double* s1, double* s2) {
  if (l.cl) return channel_sums_cl<T, kMask>(l, a, ka, b, kb, mask, c0, c1, s1, s2);
  std::fill(s1, s1 + (c1 - c0), 0.0);
  std::fill(s2, s2 + (c1 - c0), 0.0);
  if (l.S >= kRowMin) {
    constexpr int64_t L = kBnLanes<T>;
    for (int64_t c = c0; c < c1; ++c) {
      T a1[L] = {}, a2[L] = {};
      int64_t pending = 0;
      auto fold = [&] {
        double d1 = 0, d2 = 0;
        for (int64_t j = 0; j < L; ++j) {
          d1 += a1[j];
          d2 += a2[j];
          a1[j] = T(0);
          a2[j] = T(0);
        }
        s1[c - c0] += d1;
        s2[c - c0] += d2;
        pending = 0;
      };
      for (int64_t n = 0; n < l.N; ++n) {
        const int64_t off = (n * l.C + c) * l.S;
        for (int64_t i = 0; i < l.S; i += kBnFold) {
          const int64_t len = std::min(kBnFold, l.S - i);
          lane_sums<T, kMask>(a + off + i, ka[c], b + off + i, kb[c],
                              kMask ? mask + off + i : nullptr, len, a1, a2);
          pending += len;
          if (pending >= kBnFold) fold();
        }
      }
      fold();
    }
    return;
  }
  for (int64_t n = 0; n < l.N; ++n)
    for (int64_t s = 0; s < l.S; ++s) {
      const T* ar = a + n * l.C * l.S + s;
      const T* br = b + n * l.C * l.S + s;
      const T* mr = kMask ? mask + n * l.C * l.S + s : nullptr;
      for (int64_t c = c0; c < c1; ++c) {
        const T av = masked<kMask>(ar[c * l.S], kMask ? mr[c * l.S] : T(0));
        const double u = double(av) - double(ka[c]);
        s1[c - c0] += u;
        s2[c - c0] += u * (double(br[c * l.S]) - double(kb[c]));
      }
    }
}

// out = p * (x - xm) + q * (y - ym) + r per channel (y may be null: then q, ym are ignored).
// Centering first, rather than folding the means into r, keeps f32 accurate when a channel's mean
// is large against its spread (x * scale and the folded shift would nearly cancel). The epilogues
// of the fused ReLU: kMask reads x as 0 where mask <= 0 (ReLU's backward on dy), kRelu stores
// relu(out) (ReLU's forward, NaN kept as relu keeps it); both are selects inside the vectorized
// loop.
template <class T, bool kMask = false, bool kRelu = false>
void channel_affine(const Layout& l, const T* x, const T* xm, const T* y, const T* ym,
                    const T* mask, T* out, const T* p, const T* q, const T* r, int64_t c0,
                    int64_t c1) {
  const auto xv = [](const T* xr, const T* mr, int64_t i) {
    return masked<kMask>(xr[i], kMask ? mr[i] : T(0));
  };
  const auto store = [](T v) { return relu_if<kRelu>(v); };
  for (int64_t n = 0; n < l.N; ++n) {
    if (l.S == 1) {
      const T* xr = x + n * l.C;
      const T* mr = kMask ? mask + n * l.C : nullptr;
      const T* yr = y ? y + n * l.C : nullptr;
      T* o = out + n * l.C;
      if (yr)
        for (int64_t c = c0; c < c1; ++c)
          o[c] = store(p[c] * (xv(xr, mr, c) - xm[c]) + q[c] * (yr[c] - ym[c]) + r[c]);
      else
        for (int64_t c = c0; c < c1; ++c) o[c] = store(p[c] * (xv(xr, mr, c) - xm[c]) + r[c]);
      continue;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t off = (n * l.C + c) * l.S;
      const T pc = p[c], xmc = xm[c], rc = r[c];
      const T* xr = x + off;
      const T* mr = kMask ? mask + off : nullptr;
      T* o = out + off;
      if (y) {
        const T qc = q[c], ymc = ym[c];
        const T* yr = y + off;
        for (int64_t s = 0; s < l.S; ++s)
          o[s] = store(pc * (xv(xr, mr, s) - xmc) + qc * (yr[s] - ymc) + rc);
      } else {
        for (int64_t s = 0; s < l.S; ++s) o[s] = store(pc * (xv(xr, mr, s) - xmc) + rc);
      }
    }
  }
}

// channel_affine on channels-last memory for all channels, parallel over the (n, s) rows (a
// split by channels would have two threads write one cache line): the same expression per value
// as channel_affine, so equal bit for bit.
template <class T, bool kMask = false, bool kRelu = false>
void affine_cl(const Layout& l, const T* x, const T* xm, const T* y, const T* ym, const T* mask,
               T* out, const T* p, const T* q, const T* r) {
  const int64_t C = l.C;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(C, 1));
  parallel_for(0, l.N * l.S, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t off = row * C;
      const T* xr = x + off;
      const T* mr = kMask ? mask + off : nullptr;
      T* o = out + off;
      const auto xv = [&](int64_t c) { return masked<kMask>(xr[c], kMask ? mr[c] : T(0)); };
      const auto store = [](T v) { return relu_if<kRelu>(v); };
      if (y) {
        const T* yr = y + off;
        STOKE_BN_IVDEP
        for (int64_t c = 0; c < C; ++c)
          o[c] = store(p[c] * (xv(c) - xm[c]) + q[c] * (yr[c] - ym[c]) + r[c]);
      } else {
        STOKE_BN_IVDEP
        for (int64_t c = 0; c < C; ++c) o[c] = store(p[c] * (xv(c) - xm[c]) + r[c]);
      }
    }
  });
}

// Reads element c of a 1-D tensor (any stride) as double; 1 / 0 defaults for undefined tensors.
template <class T>
double at(const Tensor& t, int64_t c, double fallback) {
  return t.defined() ? double(t.data<T>()[c * t.stride(0)]) : fallback;
}

// The CPU's dtype rule for a per-channel tensor: the input's dtype. Shapes, and which tensors must
// be defined together, are checked by the entry points (ops/batch_norm.cpp).
void check_channel_tensor(const char* op, const Tensor& t, const char* name, const Tensor& x) {
  if (t.defined()) check_same_dtype(op, x, "input", t, name);
}

}  // namespace

BatchNormForward CpuBackend::batch_norm_forward(const Tensor& input, const Tensor& running_mean,
                                                const Tensor& running_var, const Tensor& weight,
                                                const Tensor& bias,
                                                const BatchNormOptions& options) {
  const char* op = "batch_norm";
  check_float(op, input, "input");
  check_channel_tensor(op, running_mean, "running_mean", input);
  check_channel_tensor(op, running_var, "running_var", input);
  check_channel_tensor(op, weight, "weight", input);
  check_channel_tensor(op, bias, "bias", input);
  // running_mean/var together, eps and the values per channel: ops/batch_norm.cpp.
  const bool use_batch = options.training || !running_mean.defined();
  const Tensor x = input.contiguous(kernel_format(input));
  const Layout l = layout_of(x);
  const int64_t M = l.N * l.S;
  BatchNormForward r;
  r.output = empty_in_format(x.shape(), {.dtype = x.dtype()}, kernel_format(x));
  r.save_mean = empty({l.C}, {.dtype = x.dtype()});
  r.save_invstd = empty({l.C}, {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* mean = r.save_mean.data<T>();
    T* invstd = r.save_invstd.data<T>();
    // y = (x - center) * scale + shift with center = the channel's first element (batch
    // statistics) or the running mean: x - first is nearly exact, so f32 keeps its precision even
    // where rounding the mean itself to f32 would not.
    std::vector<T> scale(l.C), shift(l.C), first(l.C, T(0));
    std::vector<double> offset(l.C, 0.0);  // mean - center, in double
    if (use_batch) {
      if (M > 0)
        for (int64_t c = 0; c < l.C; ++c) first[c] = xp[l.cl ? c : c * l.S];  // position 0
      std::vector<double> var(l.C);
      for_channels(l, [&](int64_t c0, int64_t c1) {
        std::vector<double> s1(c1 - c0), s2(c1 - c0);
        channel_sums<T>(l, xp, first.data(), xp, first.data(), nullptr, c0, c1, s1.data(),
                        s2.data());
        for (int64_t c = c0; c < c1; ++c) {
          const double m1 = s1[c - c0] / double(M);
          const double v = std::max(0.0, s2[c - c0] / double(M) - m1 * m1);
          var[c] = v;
          offset[c] = m1;
          mean[c] = T(double(first[c]) + m1);
          invstd[c] = T(1.0 / std::sqrt(v + options.eps));
        }
      });
      if (options.training && running_mean.defined()) {
        // In place, without autograd: running statistics are buffers, not graph values.
        T* rm = running_mean.data<T>();
        T* rv = running_var.data<T>();
        const int64_t sm = running_mean.stride(0), sv = running_var.stride(0);
        const double mom = options.momentum;
        for (int64_t c = 0; c < l.C; ++c) {
          rm[c * sm] = T((1 - mom) * double(rm[c * sm]) + mom * double(mean[c]));
          rv[c * sv] = T((1 - mom) * double(rv[c * sv]) + mom * var[c] * double(M) / double(M - 1));
        }
      }
    } else {
      for (int64_t c = 0; c < l.C; ++c) {
        mean[c] = T(at<T>(running_mean, c, 0));
        first[c] = mean[c];
        invstd[c] = T(1.0 / std::sqrt(at<T>(running_var, c, 1) + options.eps));
      }
    }
    for (int64_t c = 0; c < l.C; ++c) {
      const double sc = double(invstd[c]) * at<T>(weight, c, 1);
      scale[c] = T(sc);
      shift[c] = T(at<T>(bias, c, 0) - offset[c] * sc);
    }
    T* out = r.output.data<T>();
    if (l.cl) {
      if (options.relu)
        affine_cl<T, false, true>(l, xp, first.data(), nullptr, nullptr, nullptr, out, scale.data(),
                                  nullptr, shift.data());
      else
        affine_cl<T>(l, xp, first.data(), nullptr, nullptr, nullptr, out, scale.data(), nullptr,
                     shift.data());
      return;
    }
    for_channels(l, [&](int64_t c0, int64_t c1) {
      if (options.relu)
        channel_affine<T, false, true>(l, xp, first.data(), nullptr, nullptr, nullptr, out,
                                       scale.data(), nullptr, shift.data(), c0, c1);
      else
        channel_affine<T>(l, xp, first.data(), nullptr, nullptr, nullptr, out, scale.data(),
                          nullptr, shift.data(), c0, c1);
    });
  });
  return r;
}

BatchNormGrads CpuBackend::batch_norm_backward(const Tensor& grad_output, const Tensor& input,
                                               const Tensor& weight, const Tensor& save_mean,
                                               const Tensor& save_invstd, bool training,
                                               std::array<bool, 3> output_mask,
                                               const Tensor& relu_output) {
  const char* op = "batch_norm_backward";
  check_float(op, input, "input");
  check_channel_tensor(op, weight, "weight", input);
  check_channel_tensor(op, save_mean, "save_mean", input);
  check_channel_tensor(op, save_invstd, "save_invstd", input);
  const MemoryFormat format = kernel_format(input);
  const Tensor x = input.contiguous(format), dy = grad_output.contiguous(format);
  const Tensor relu_y = relu_output.defined() ? relu_output.contiguous(format) : Tensor();
  const Layout l = layout_of(x);
  const int64_t M = l.N * l.S;
  BatchNormGrads g;
  if (output_mask[0]) g.grad_input = empty_in_format(x.shape(), {.dtype = x.dtype()}, format);
  if (output_mask[1]) g.grad_weight = empty({l.C}, {.dtype = x.dtype()});
  if (output_mask[2]) g.grad_bias = empty({l.C}, {.dtype = x.dtype()});
  // The sums are needed for weight/bias grads, and for the input grad in training.
  const bool need_sums = output_mask[1] || output_mask[2] || (training && output_mask[0]);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    const T* mask = relu_y.defined() ? relu_y.data<T>() : nullptr;
    std::vector<T> mean(l.C), invstd(l.C), zero(l.C, T(0)), k1(l.C), k2(l.C), k3(l.C);
    for (int64_t c = 0; c < l.C; ++c) {
      mean[c] = T(at<T>(save_mean, c, 0));
      invstd[c] = T(at<T>(save_invstd, c, 1));
    }
    for_channels(l, [&](int64_t c0, int64_t c1) {
      std::vector<double> sum_dy(c1 - c0, 0.0), sum_dy_xmu(c1 - c0, 0.0);
      if (need_sums && mask)
        channel_sums<T, true>(l, dyp, zero.data(), xp, mean.data(), mask, c0, c1, sum_dy.data(),
                              sum_dy_xmu.data());
      else if (need_sums)
        channel_sums<T>(l, dyp, zero.data(), xp, mean.data(), nullptr, c0, c1, sum_dy.data(),
                        sum_dy_xmu.data());
      for (int64_t c = c0; c < c1; ++c) {
        const double is = double(invstd[c]), w = at<T>(weight, c, 1);
        const double sdy = sum_dy[c - c0], sdx = sum_dy_xmu[c - c0];
        if (output_mask[1]) g.grad_weight.data<T>()[c] = T(sdx * is);
        if (output_mask[2]) g.grad_bias.data<T>()[c] = T(sdy);
        // dx = k1 * dy + k2 * (x - mean) + k3. Training also differentiates through the batch mean
        // and variance: dx = w * is * (dy - mean(dy) - (x - mean) * is^2 * mean(dy * (x - mean))).
        const double a = w * is;
        const double b = training ? -a * is * is * sdx / double(M) : 0.0;
        const double d = training ? -a * sdy / double(M) : 0.0;
        k1[c] = T(a);
        k2[c] = T(b);
        k3[c] = T(d);
      }
      if (l.cl) return;  // the input gradient: affine_cl below, over rows
      if (output_mask[0] && mask)
        channel_affine<T, true>(l, dyp, zero.data(), training ? xp : nullptr, mean.data(), mask,
                                g.grad_input.data<T>(), k1.data(), k2.data(), k3.data(), c0, c1);
      else if (output_mask[0])
        channel_affine<T>(l, dyp, zero.data(), training ? xp : nullptr, mean.data(), nullptr,
                          g.grad_input.data<T>(), k1.data(), k2.data(), k3.data(), c0, c1);
    });
    if (l.cl && output_mask[0]) {
      if (mask)
        affine_cl<T, true>(l, dyp, zero.data(), training ? xp : nullptr, mean.data(), mask,
                           g.grad_input.data<T>(), k1.data(), k2.data(), k3.data());
      else
        affine_cl<T>(l, dyp, zero.data(), training ? xp : nullptr, mean.data(), nullptr,
                     g.grad_input.data<T>(), k1.data(), k2.data(), k3.data());
    }
  });
  return g;
}

}  // namespace stoke::ops::cpu
