// CPU losses. cross_entropy is fused: one forward pass per row computes max, log-sum-exp, the
// target logit and the row sum (for label smoothing); the backward recomputes softmax from the
// saved log-sum-exp in one pass. Per-row losses are combined serially in f64 so that reductions
// are deterministic whatever the thread count.
#include <cmath>

#include "core/parallel.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/cpu/row_kernels.h"
#include "ops/creation.h"
#include "ops/loss.h"
#include "ops/reduce.h"

namespace stoke::ops::cpu {
namespace {

constexpr int64_t kLossGrain = 32768;

// Checks (N, C) input and (N) i64 target, and every target value (serially, so the first bad row
// is the one reported).
void check_classification(const char* op, const Tensor& input, const char* input_name,
                          const Tensor& target, int64_t ignore_index) {
  check_float(op, input, input_name);
  check_dim(op, input, input_name, 2, "(N, C)");
  STOKE_CHECK(target.dtype() == DType::i64, op,
              "expected target of dtype i64 (class indices), got ", target.dtype());
  STOKE_CHECK(target.dim() == 1 && target.size(0) == input.size(0), op,
              "expected target of shape [", input.size(0), "] for ", input_name, " of shape ",
              input.shape(), ", got target of shape ", target.shape());
  const int64_t c = input.size(1);
  STOKE_CHECK(c > 0 || input.size(0) == 0, op, "expected at least one class, got ", input_name,
              " of shape ", input.shape());
  const Tensor t = target.contiguous();
  const int64_t* pt = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    STOKE_CHECK(pt[i] == ignore_index || (pt[i] >= 0 && pt[i] < c), op, "target ", pt[i],
                " out of range for ", c, " classes at row ", i);
}

// Combines per-row losses (a contiguous (N) tensor) as `reduction` asks; `count` divides for mean.
Tensor reduce_rows(const Tensor& rows, Reduction reduction, double count) {
  if (reduction == Reduction::none) return rows;
  Tensor out = empty({}, {.dtype = rows.dtype()});
  dispatch_float(rows.dtype(), "loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = rows.data<T>();
    double s = 0;
    for (int64_t i = 0; i < rows.numel(); ++i) s += p[i];
    *out.data<T>() = static_cast<T>(reduction == Reduction::mean ? s / count : s);
  });
  return out;
}

int64_t count_valid(const Tensor& target, int64_t ignore_index) {
  const Tensor t = target.contiguous();
  const int64_t* p = t.data<int64_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += p[i] != ignore_index;
  return n;
}

// Per-row gradient scale: grad (sum), grad / count (mean) or grad[i] (none); 0 on ignored rows.
template <class T>
std::vector<T> row_scales(const Tensor& grad, const Tensor& target, Reduction reduction,
                          int64_t ignore_index, const char* op) {
  const int64_t n = target.numel();
  const Tensor t = target.contiguous();
  const int64_t* pt = t.data<int64_t>();
  std::vector<T> scale(n);
  if (reduction == Reduction::none) {
    check_shape(op, grad, "grad", {n});
    const Tensor g = grad.contiguous();
    const T* pg = g.data<T>();
    std::copy(pg, pg + n, scale.begin());
  } else {
    STOKE_CHECK(grad.numel() == 1, op, "expected a one-element grad, got shape ", grad.shape());
    T s = static_cast<T>(grad.item());
    if (reduction == Reduction::mean) s /= static_cast<T>(count_valid(target, ignore_index));
    std::fill(scale.begin(), scale.end(), s);
  }
  for (int64_t i = 0; i < n; ++i)
    if (pt[i] == ignore_index) scale[i] = 0;
  return scale;
}

}  // namespace

CrossEntropyForward CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                      const CrossEntropyOptions& options) {
  const char* op = "cross_entropy";
  check_classification(op, logits, "logits", target, options.ignore_index);
  STOKE_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1, op,
              "expected label_smoothing in [0, 1], got ", options.label_smoothing);
  const int64_t n = logits.size(0), c = logits.size(1);
  const Tensor x = logits.detach().contiguous(), t = target.contiguous();
  Tensor rows = empty({n}, {.dtype = x.dtype()});
  Tensor lse = empty({n}, {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const int64_t* pt = t.data<int64_t>();
    T *pr = rows.data<T>(), *pl = lse.data<T>();
    const T eps = static_cast<T>(options.label_smoothing);
    parallel_for(0, n, std::max<int64_t>(1, kLossGrain / std::max<int64_t>(c, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t i = b; i < e; ++i) {
                     const T* xr = px + i * c;
                     const T m = cpu::row_max(xr, c);
                     const T s =
                         cpu::lane_sum<T>(c, [&](int64_t j) { return cpu::vexp(xr[j] - m); });
                     const T l = m + std::log(s);
                     pl[i] = l;
                     if (pt[i] == options.ignore_index) {
                       pr[i] = 0;
                       continue;
                     }
                     T loss = (1 - eps) * (l - xr[pt[i]]);
                     if (eps > 0) {
                       const T sx = cpu::lane_sum<T>(c, [&](int64_t j) { return xr[j]; });
                       loss += eps * (l - sx / static_cast<T>(c));
                     }
                     pr[i] = loss;
                   }
                 });
  });
  const double count = static_cast<double>(count_valid(t, options.ignore_index));
  return {reduce_rows(rows, options.reduction, count), lse};
}

Tensor CpuBackend::cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                          const Tensor& target, const Tensor& lse,
                                          const CrossEntropyOptions& options) {
  const char* op = "cross_entropy_backward";
  check_classification(op, logits, "logits", target, options.ignore_index);
  check_same_dtype(op, grad, "grad", logits, "logits");
  check_same_dtype(op, lse, "lse", logits, "logits");
  check_shape(op, lse, "lse", {logits.size(0)});
  const int64_t n = logits.size(0), c = logits.size(1);
  const Tensor x = logits.contiguous(), t = target.contiguous(), l = lse.contiguous();
  Tensor gx = empty({n, c}, {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::vector<T> scale =
        row_scales<T>(grad, t, options.reduction, options.ignore_index, op);
    const T* px = x.data<T>();
    const T* pl = l.data<T>();
    const int64_t* pt = t.data<int64_t>();
    T* pg = gx.data<T>();
    const T eps = static_cast<T>(options.label_smoothing);
    const T off = eps / static_cast<T>(c);
    parallel_for(0, n, std::max<int64_t>(1, kLossGrain / std::max<int64_t>(c, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t i = b; i < e; ++i) {
                     const T* xr = px + i * c;
                     T* gr = pg + i * c;
                     const T s = scale[i], li = pl[i];
                     if (pt[i] == options.ignore_index) {
                       std::fill(gr, gr + c, T(0));
                       continue;
                     }
                     for (int64_t j = 0; j < c; ++j) gr[j] = (cpu::vexp(xr[j] - li) - off) * s;
                     gr[pt[i]] -= (1 - eps) * s;
                   }
                 });
  });
  return gx;
}

// --- nll and mse: one pass each (the CUDA backend composes gather, where and reductions) -------

Tensor CpuBackend::class_targets(const char* op, const Tensor& target, int64_t classes,
                                 int64_t ignore_index) {
  STOKE_CHECK(target.dtype() == DType::i64, op,
              "expected target of dtype i64 (class indices), got ", target.dtype());
  Tensor t = target.contiguous().clone();
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    STOKE_CHECK(p[i] == ignore_index || (p[i] >= 0 && p[i] < classes), op, "target ", p[i],
                " out of range for ", classes, " classes at row ", i);
    if (p[i] == ignore_index) p[i] = 0;
  }
  return t;
}

Tensor CpuBackend::nll_loss(const Tensor& log_probs, const Tensor& target,
                            const NllLossOptions& options) {
  const char* op = "nll_loss";
  check_classification(op, log_probs, "log_probs", target, options.ignore_index);
  const int64_t n = log_probs.size(0);
  const Tensor t = target.contiguous();
  Tensor rows = empty({n}, {.dtype = log_probs.dtype()});
  dispatch_float(log_probs.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* base = static_cast<const T*>(log_probs.data_ptr());
    const int64_t s0 = log_probs.stride(0), s1 = log_probs.stride(1);
    const int64_t* pt = t.data<int64_t>();
    T* pr = rows.data<T>();
    for (int64_t i = 0; i < n; ++i)
      pr[i] = pt[i] == options.ignore_index ? T(0) : -base[i * s0 + pt[i] * s1];
  });
  return reduce_rows(rows, options.reduction,
                     static_cast<double>(count_valid(t, options.ignore_index)));
}

Tensor CpuBackend::nll_loss_backward(const Tensor& grad, const Shape& input_shape,
                                     const Tensor& target, const NllLossOptions& options) {
  const char* op = "nll_loss_backward";
  check_float(op, grad, "grad");
  STOKE_CHECK(input_shape.size() == 2 && target.numel() == input_shape[0], op,
              "expected input shape (N, C) with N = ", target.numel(), ", got ", input_shape);
  Tensor gx = zeros(input_shape, {.dtype = grad.dtype()});
  const Tensor t = target.contiguous();
  dispatch_float(grad.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::vector<T> scale =
        row_scales<T>(grad, t, options.reduction, options.ignore_index, op);
    const int64_t* pt = t.data<int64_t>();
    T* pg = gx.data<T>();
    const int64_t c = input_shape[1];
    for (int64_t i = 0; i < input_shape[0]; ++i)
      if (pt[i] != options.ignore_index) {
        STOKE_CHECK(pt[i] >= 0 && pt[i] < c, op, "target ", pt[i], " out of range for ", c,
                    " classes at row ", i);
        pg[i * c + pt[i]] = -scale[i];
      }
  });
  return gx;
}

Tensor CpuBackend::mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss";
  check_float(op, input, "input");
  const Tensor x = input.detach().contiguous(), y = target.detach().contiguous();
  Tensor sq = empty(x.shape(), {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.data<T>(), *py = y.data<T>();
    T* ps = sq.data<T>();
    parallel_for(0, x.numel(), kLossGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ps[i] = (px[i] - py[i]) * (px[i] - py[i]);
    });
  });
  switch (reduction) {
    case Reduction::none:
      return sq;
    case Reduction::sum:
      return ops::sum(sq);
    case Reduction::mean:
      break;
  }
  return ops::mean(sq);
}

Tensor CpuBackend::mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                                     Reduction reduction) {
  const char* op = "mse_loss_backward";
  check_float(op, input, "input");
  const Tensor x = input.contiguous(), y = target.contiguous(), g = grad.contiguous();
  Tensor gx = empty(x.shape(), {.dtype = x.dtype()});
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *px = x.data<T>(), *py = y.data<T>(), *pg = g.data<T>();
    T* po = gx.data<T>();
    if (reduction == Reduction::none) {
      parallel_for(0, x.numel(), kLossGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) po[i] = 2 * (px[i] - py[i]) * pg[i];
      });
      return;
    }
    T s = 2 * pg[0];
    if (reduction == Reduction::mean) s /= static_cast<T>(x.numel());
    parallel_for(0, x.numel(), kLossGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) po[i] = s * (px[i] - py[i]);
    });
  });
  return gx;
}

}  // namespace stoke::ops::cpu
